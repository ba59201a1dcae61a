package counter_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
)

// BenchmarkCounter_Record measures hits per second on one link (one
// object): each Record is a turn that writes its bucket and reads the
// alarm; the flush, 30 s away, does not run.
func BenchmarkCounter_Record(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			store, err := counter.OpenStore(filepath.Join(b.TempDir(), "analytics.sqlite"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			rt, err := core.Open(core.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			ns, err := core.Register(rt, "counters", counter.Options{Sink: store}.New)
			if err != nil {
				b.Fatal(err)
			}
			stub, err := ns.Get("link-1")
			if err != nil {
				b.Fatal(err)
			}
			record := func(ctx context.Context, c *counter.Counter) error { return c.Record(ctx) }
			b.ReportAllocs()
			b.SetParallelism(callers)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := core.Do(context.Background(), stub, record); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
			b.ReportMetric(float64(rt.Stats().Commits)/float64(b.N), "commits/op")
		})
	}
}
