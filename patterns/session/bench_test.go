package session_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
)

// BenchmarkSession_Touch measures Touch calls per second: each writes the
// deadline and the alarm. sessions=1 is one hot session; sessions=64
// spreads the same callers (32 per CPU) over 64 objects.
func BenchmarkSession_Touch(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			rt, err := core.Open(core.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			ns, err := core.Register(rt, "sessions", session.New)
			if err != nil {
				b.Fatal(err)
			}
			stubs := make([]*core.Stub[*session.Session], n)
			for i := range stubs {
				if stubs[i], err = ns.Get(fmt.Sprint("sid-", i)); err != nil {
					b.Fatal(err)
				}
			}
			touch := func(ctx context.Context, s *session.Session) error { _, err := s.Touch(ctx); return err }
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) % n // callers spread over the sessions
				for pb.Next() {
					if err := core.Do(context.Background(), stubs[i], touch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "touches/s")
		})
	}
}
