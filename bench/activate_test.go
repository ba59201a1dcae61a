package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// BenchmarkActivate measures bringing objects with storage into memory.
//
// object=evicted is the latency of the first call to an existing object
// that is not in memory: the runtime opens its database and runs the
// constructor (CREATE TABLE IF NOT EXISTS, read row 1) as the object's
// first turn, and the call (which itself does nothing) returns once that
// turn is over. To have evicted objects on demand, it makes a pool of
// objects, then closes the runtime and opens a new one over the same
// directory with the timer stopped, and calls each object once; when the
// pool is used up, it restarts the runtime again. So each timed call pays
// exactly "reopen + constructor". Not a small IdleTimeout: the janitor
// evicts on its own schedule, so a call could find its object still
// resident, or race the eviction. Not a small MaxOpenObjects: then the
// activating call also evicts the least recently used object and closes
// its database, synchronously (the runtime sheds inside the turn that opens
// a database), which is a different cost; object=evicted-lru measures that
// one on its own, with MaxOpenObjects 32 and 64 objects called in turn, so
// that every call activates one object and evicts another. Both check that
// every timed call ran the constructor. "Cold" means not in the process:
// the files are still in the OS page cache, as they would be on a server
// that evicted them seconds ago.
//
// object=new measures creation of new objects by 16 concurrent callers:
// each call goes to a new name, whose constructor creates the table and
// inserts a row, and returns once that is durable (one database file
// created, one commit). Past MaxOpenObjects (1,024) it includes evicting
// the least recently used objects, as a server creating objects would.
func BenchmarkActivate(b *testing.B) {
	b.Run("object=evicted", benchActivateEvicted)
	b.Run("object=evicted-lru", benchActivateLRU)
	b.Run("object=new/callers=16", func(b *testing.B) { benchActivateNew(b, 16) })
}

func benchActivateEvicted(b *testing.B) {
	const pool = 256
	dir := b.TempDir()
	ctx := context.Background()
	open := func() (*core.Runtime, []*core.Stub[*table]) {
		rt := openRuntime(b, core.Options{Dir: dir})
		return rt, registerTables(b, rt, pool)
	}
	rt, stubs := open()
	activate(b, stubs) // creates them
	closeRuntime(b, rt)

	rt, stubs = open()
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 4096)
	used, constructs := 0, int64(0)
	for b.Loop() {
		if used == pool {
			b.StopTimer()
			constructs += rt.Stats().Constructs
			closeRuntime(b, rt)
			rt, stubs = open()
			used = 0
			b.StartTimer()
		}
		start := time.Now()
		if err := core.Do(ctx, stubs[used], nopCall); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		used++
	}
	constructs += rt.Stats().Constructs
	closeRuntime(b, rt)
	if constructs != int64(len(lat)) {
		b.Fatalf("%d constructor runs for %d activations: not every call was an activation", constructs, len(lat))
	}
	reportLatency(b, lat)
}

func benchActivateLRU(b *testing.B) {
	const pool, open = 64, 32
	ctx := context.Background()
	rt := openRuntime(b, core.Options{MaxOpenObjects: open})
	defer closeRuntime(b, rt)
	stubs := registerTables(b, rt, pool)
	for _, s := range stubs { // in order, so that the least recently used is next
		if err := core.Do(ctx, s, nopCall); err != nil {
			b.Fatal(err)
		}
	}
	before := rt.Stats().Constructs
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 4096)
	for b.Loop() {
		start := time.Now()
		if err := core.Do(ctx, stubs[len(lat)%pool], nopCall); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	if got := rt.Stats().Constructs - before; got != int64(len(lat)) {
		b.Fatalf("%d constructor runs for %d activations: not every call was an activation", got, len(lat))
	}
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(percentile(lat, 0.50))/float64(time.Microsecond), "p50-activate-us")
	b.ReportMetric(float64(percentile(lat, 0.90))/float64(time.Microsecond), "p90-activate-us")
}

func benchActivateNew(b *testing.B, callers int) {
	rt := openRuntime(b, core.Options{})
	defer closeRuntime(b, rt)
	ns, err := core.Register(rt, "tables", newTable)
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	runCallers(b, callers, "objects/s", func(ctx context.Context) error {
		s, err := ns.Get("new-" + strconv.FormatInt(next.Add(1), 10))
		if err != nil {
			return err
		}
		return core.Do(ctx, s, nopCall)
	})
}
