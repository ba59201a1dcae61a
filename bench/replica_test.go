package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// counterNS registers counters: one row, incremented by each call.
func counterNS(b *testing.B, rt *core.Runtime) *core.Namespace[*core.State] {
	ns, err := core.Register(rt, "counters", func(ctx context.Context, st *core.State) (*core.State, error) {
		_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS c(id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS msgs(id INTEGER PRIMARY KEY, at INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS msgs_at ON msgs(at)`)
		return st, err
	})
	if err != nil {
		b.Fatal(err)
	}
	return ns
}

func increment(ctx context.Context, st *core.State) error {
	_, err := st.Storage().Exec(ctx, "INSERT INTO c(id, n) VALUES (1, 1) ON CONFLICT(id) DO UPDATE SET n = n + 1")
	return err
}

func clusterNode(b *testing.B, c *replogtest.MemCluster, name string, every int, sync ...string) *core.Runtime {
	v := c.Node()
	rt, err := core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), Synchronous: append(sync, "")[0],
		Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), SnapshotEvery: every}})
	if err != nil {
		b.Fatal(err)
	}
	return rt
}

// commitShapes are typical commits of the cookbook's patterns: a counter increment (rate limiter,
// link counter), a KV put of a new 100-byte value (sessions, carts), and a 1 KB row appended to an
// indexed table (a room's message log).
var commitShapes = []struct {
	name string
	fn   func(i int) func(ctx context.Context, st *core.State) error
}{
	{"counter", func(int) func(context.Context, *core.State) error { return increment }},
	{"kv-put-100B", func(i int) func(context.Context, *core.State) error {
		return func(ctx context.Context, st *core.State) error {
			return st.Storage().Put(ctx, fmt.Sprintf("session/%08d", i), make([]byte, 100))
		}
	}},
	{"row-1KB", func(i int) func(context.Context, *core.State) error {
		return func(ctx context.Context, st *core.State) error {
			_, err := st.Storage().Exec(ctx, "INSERT INTO msgs(at, body) VALUES (?, ?)", i, fmt.Sprintf("%01024d", i))
			return err
		}
	}},
}

// BenchmarkReplicaCommit is one caller committing to one object, single-process and in cluster mode
// over the in-memory engine (so the difference is the runtime's own cost of shipping: reading the
// commit's WAL frames, encoding and deflating them, the lease check; not a network's), for each
// commit shape. It reports the records per commit and their bytes, and the page images they carry
// before compression.
func BenchmarkReplicaCommit(b *testing.B) {
	for _, shape := range commitShapes {
		for _, mode := range []string{"single", "cluster"} {
			b.Run("shape="+shape.name+"/mode="+mode, func(b *testing.B) {
				var rt *core.Runtime
				if mode == "single" {
					var err error
					if rt, err = core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}); err != nil {
						b.Fatal(err)
					}
				} else {
					rt = clusterNode(b, replogtest.NewMemCluster(), "n1", 1<<30)
				}
				defer rt.Close()
				stub, _ := counterNS(b, rt).Get("c")
				ctx := context.Background()
				if err := core.Do(ctx, stub, increment); err != nil {
					b.Fatal(err)
				}
				before := rt.Stats().Cluster
				i := 0
				for b.Loop() {
					if err := core.Do(ctx, stub, shape.fn(i)); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.StopTimer()
				if mode == "cluster" {
					s := rt.Stats().Cluster
					commits := float64(s.Commits - before.Commits)
					b.ReportMetric(float64(s.Records-before.Records)/commits, "records/commit")
					b.ReportMetric(float64(s.RecordBytes-before.RecordBytes)/commits, "bytes/commit")
					b.ReportMetric(float64(s.PageBytes-before.PageBytes)/commits, "page-bytes/commit")
				}
			})
		}
	}
}

// BenchmarkReplicaShipCost is BenchmarkReplicaCommit's counter with Synchronous NORMAL (no fsync at
// commit), so that what it measures is the runtime's own work per commit, single-process and in
// cluster mode: the difference is the cost of shipping (reading the WAL frames, deflating them,
// checksumming, the lease check, the append to the in-memory engine).
func BenchmarkReplicaShipCost(b *testing.B) {
	for _, mode := range []string{"single", "cluster"} {
		b.Run("mode="+mode, func(b *testing.B) {
			var rt *core.Runtime
			if mode == "single" {
				var err error
				if rt, err = core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), Synchronous: "NORMAL"}); err != nil {
					b.Fatal(err)
				}
			} else {
				rt = clusterNode(b, replogtest.NewMemCluster(), "n1", 1<<30, "NORMAL")
			}
			defer rt.Close()
			stub, _ := counterNS(b, rt).Get("c")
			ctx := context.Background()
			for b.Loop() {
				if err := core.Do(ctx, stub, increment); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReplicaReplay is the first call to an object on a node with an empty directory, whose
// log holds records=N counter increments (no snapshot): the node takes the lease, replays the log
// into a new file, appends its epoch record, and runs the call. It reports records replayed per
// second. snapshot=yes replays the same object from a snapshot and no records.
func BenchmarkReplicaReplay(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, snap := range []bool{false, true} {
			if snap && n != 10000 {
				continue
			}
			b.Run(fmt.Sprintf("records=%d/snapshot=%v", n, snap), func(b *testing.B) {
				c := replogtest.NewMemCluster()
				every := 1 << 30
				if snap {
					every = n
				}
				rt := clusterNode(b, c, "writer", every)
				stub, _ := counterNS(b, rt).Get("c")
				ctx := context.Background()
				for range n {
					if err := core.Do(ctx, stub, increment); err != nil {
						b.Fatal(err)
					}
				}
				if err := rt.Close(); err != nil {
					b.Fatal(err)
				}
				recs := len(c.Records("counters/c"))
				var took time.Duration
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					rt := clusterNode(b, c, fmt.Sprintf("reader%d", i), 1<<30)
					stub, _ := counterNS(b, rt).Get("c")
					b.StartTimer()
					start := time.Now()
					got, err := core.Call(ctx, stub, func(ctx context.Context, st *core.State) (int, error) {
						var v int
						err := st.Storage().One(ctx, "SELECT n FROM c").Scan(&v)
						return v, err
					})
					took += time.Since(start)
					b.StopTimer()
					if err != nil || got < n {
						b.Fatalf("replayed counter %d, %v; want at least %d", got, err, n)
					}
					rt.Close()
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(recs), "records")
				b.ReportMetric(float64(recs)*float64(b.N)/took.Seconds(), "records/s")
			})
		}
	}
}

// BenchmarkReplicaActivate is the first call to an object whose node evicted it (its file is in the
// node's directory, its log holds 100 counter increments), single-process and in cluster mode: in
// cluster mode the activation also takes the lease, reads the file's position, checks it against
// the log, appends an epoch record and indexes the file. The runtime is reopened over the same
// directory (its timer stopped) so that each timed call activates.
func BenchmarkReplicaActivate(b *testing.B) {
	for _, mode := range []string{"single", "cluster"} {
		b.Run("mode="+mode, func(b *testing.B) {
			dir := b.TempDir()
			c := replogtest.NewMemCluster()
			open := func() *core.Runtime {
				opts := core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)}
				if mode == "cluster" {
					v := c.Node()
					opts.Replication = &core.Replication{Node: "n1", Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), SnapshotEvery: 1 << 30}
				}
				rt, err := core.Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				return rt
			}
			rt := open()
			stub, _ := counterNS(b, rt).Get("c")
			ctx := context.Background()
			for range 100 {
				if err := core.Do(ctx, stub, increment); err != nil {
					b.Fatal(err)
				}
			}
			rt.Close()
			for b.Loop() {
				b.StopTimer()
				rt := open()
				stub, _ := counterNS(b, rt).Get("c")
				b.StartTimer()
				if err := core.Do(ctx, stub, func(context.Context, *core.State) error { return nil }); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				rt.Close()
				b.StartTimer()
			}
		})
	}
}
