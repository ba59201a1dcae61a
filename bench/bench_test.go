package bench

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// The statements of the table object, shared with the baseline so that the
// runtime and bare SQLite do the same work.
const (
	createTable = "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)"
	selectFirst = "SELECT v FROM t WHERE id = 1"
	insertFirst = "INSERT INTO t(id, v) VALUES (1, ?)"
	insertRow   = "INSERT INTO t(v) VALUES (?)"
	payload     = "a row of benchmark payload"
)

// table is the object most benchmarks use: one SQLite table. Its
// constructor does what an application's should, rebuild memory from
// storage: create the table if needed, read row 1, and insert it if the
// object is new.
type table struct {
	st    *core.State
	first string // row 1, read by the constructor
}

func newTable(ctx context.Context, st *core.State) (*table, error) {
	s := st.Storage()
	if _, err := s.Exec(ctx, createTable); err != nil {
		return nil, err
	}
	t := &table{st: st}
	err := s.QueryRow(ctx, selectFirst).Scan(&t.first)
	if errors.Is(err, core.ErrNoRows) {
		t.first = payload
		_, err = s.Exec(ctx, insertFirst, payload)
	}
	return t, err
}

// insert adds one row in the turn of ctx.
func (t *table) insert(ctx context.Context) error {
	_, err := t.st.Storage().Exec(ctx, insertRow, payload)
	return err
}

// insertCall is the call the write benchmarks make.
func insertCall(ctx context.Context, t *table) error { return t.insert(ctx) }

// nopCall does nothing: the turn only activates the object if needed.
func nopCall(context.Context, *table) error { return nil }

// openRuntime opens a runtime; the caller closes it with closeRuntime.
func openRuntime(b *testing.B, opts core.Options) *core.Runtime {
	b.Helper()
	if opts.Logger == nil { // warnings and errors only: not a record per Open among the results
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := core.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return rt
}

func closeRuntime(b *testing.B, rt *core.Runtime) {
	b.Helper()
	if err := rt.Close(); err != nil {
		b.Error(err)
	}
}

// registerTables registers the table namespace and returns count stubs
// named obj-0, obj-1, ...
func registerTables(b *testing.B, rt *core.Runtime, count int) []*core.Stub[*table] {
	b.Helper()
	ns, err := core.Register(rt, "tables", newTable)
	if err != nil {
		b.Fatal(err)
	}
	stubs := make([]*core.Stub[*table], count)
	for i := range stubs {
		if stubs[i], err = ns.Get(objName(i)); err != nil {
			b.Fatal(err)
		}
	}
	return stubs
}

func objName(i int) string { return "obj-" + strconv.Itoa(i) }

// each runs fn(i) for i in [0, n) on workers goroutines and returns the
// first error.
func each(n, workers int, fn func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// activate runs one empty call on every stub, 64 at a time, so that each
// object exists, has run its constructor and holds its row.
func activate(b *testing.B, stubs []*core.Stub[*table]) {
	b.Helper()
	ctx := context.Background()
	if err := each(len(stubs), 64, func(i int) error { return core.Do(ctx, stubs[i], nopCall) }); err != nil {
		b.Fatal(err)
	}
}

// runCallers runs call from callers goroutines until the benchmark has its
// iterations, and reports the calls per second in unit. One caller runs on
// the benchmark's own goroutine with b.Loop; more run under b.RunParallel
// with SetParallelism(callers/GOMAXPROCS), rounded up when GOMAXPROCS does
// not divide callers (the log says so). The timer is stopped on return, so
// that closing the runtime is not timed.
func runCallers(b *testing.B, callers int, unit string, call func(ctx context.Context) error) {
	b.Helper()
	b.ReportAllocs()
	ctx := context.Background()
	cpu := cpuTime()
	if callers == 1 {
		for b.Loop() {
			if err := call(ctx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		p := (callers + procs - 1) / procs
		if p*procs != callers {
			b.Logf("callers=%d runs %d goroutines (GOMAXPROCS=%d)", callers, p*procs, procs)
		}
		b.SetParallelism(p)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer() // b.Loop stops it itself
	}
	reportRate(b, b.N, unit)
	reportCPU(b, cpuTime()-cpu, b.N)
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports cpu-us/op: the process's CPU time per operation, which
// counts the work done for the calls in the background too (closes of
// evicted databases, the GC). Other load on a shared machine inflates it
// far less than it does the rates.
func reportCPU(b *testing.B, cpu time.Duration, n int) {
	if cpu > 0 && n > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-us/op")
	}
}

// reportRate reports n events over the benchmark's elapsed time.
func reportRate(b *testing.B, n int, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)/s, unit)
	}
}

// percentile returns the p-th percentile (0..1) of ds, sorting ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(int(p*float64(len(ds))), len(ds)-1)]
}

// median returns the median of xs, sorting xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}
