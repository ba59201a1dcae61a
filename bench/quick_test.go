package bench

import (
	"context"
	"testing"

	"github.com/durable-go/durable/core"
)

type fwd struct{ st *core.State }

func BenchmarkQuickForward(b *testing.B) {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "f", func(st *core.State) (*fwd, error) { return &fwd{st}, nil })
	s, _ := ns.Get("x")
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			core.Call(ctx, s, func(_ context.Context, f *fwd) (int, error) { return 1, nil })
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkQuickWrite(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		for _, par := range []int{1, 32} {
			b.Run(sync+"/"+string(rune('0'+par/10))+string(rune('0'+par%10)), func(b *testing.B) { quickWrite(b, sync, par) })
		}
	}
}

func quickWrite(b *testing.B, sync string, par int) {
	rt, _ := core.Open(core.Options{Synchronous: sync})
	defer rt.Close()
	ns, _ := core.Register(rt, "w", func(st *core.State) (*fwd, error) {
		_, err := st.Storage().Exec("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB)")
		return &fwd{st}, err
	})
	s, _ := ns.Get("x")
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_, err := core.Call(ctx, s, func(_ context.Context, f *fwd) (int, error) {
				_, err := f.st.Storage().Exec("INSERT INTO t(v) VALUES (?)", "hello")
				return 1, err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(rt.Stats().Commits)/float64(b.N), "commits/op")
}
