package bench

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strconv"
	"strings"
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
// object=quiet is the latency of a call that reads row 1 of an object
// that is in memory, its database open, but idle long enough (a second)
// that the database gave its memory back (Stats.QuietDBs): the call takes
// the lookaside allocator back, prepares its statements again and reads
// its pages from the OS page cache. object=resident is the same call to an
// object that was called a moment ago: the cost the quiet one adds.
//
// object=new measures creation of new objects by 16 concurrent callers:
// each call goes to a new name, whose constructor creates the table and
// inserts a row, and returns once that is durable (one database file
// created, one commit). Past MaxOpenObjects (the default, sized by the
// machine) it includes evicting the least recently used objects, as a
// server creating objects would.
func BenchmarkActivate(b *testing.B) {
	b.Run("object=evicted/impl=runtime", benchActivateEvicted)
	b.Run("object=evicted/impl=bare", benchActivateBare)
	for _, mb := range []int{0, 5, 10, 50} {
		b.Run("history="+strconv.Itoa(mb)+"MB/after=eviction", func(b *testing.B) { benchActivateHistory(b, mb, false) })
		b.Run("history="+strconv.Itoa(mb)+"MB/after=restart", func(b *testing.B) { benchActivateHistory(b, mb, true) })
	}
	b.Run("rows=100000/after=restart/impl=runtime", func(b *testing.B) { benchActivateRows(b, false) })
	b.Run("rows=100000/after=restart/impl=bare", func(b *testing.B) { benchActivateRows(b, true) })
	b.Run("object=evicted-lru", benchActivateLRU)
	b.Run("object=quiet", func(b *testing.B) { benchCallResident(b, true) })
	b.Run("object=resident", func(b *testing.B) { benchCallResident(b, false) })
	b.Run("object=parked", benchCallParked)
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

func benchCallResident(b *testing.B, quiet bool) {
	const pool = 256
	ctx := context.Background()
	rt := openRuntime(b, core.Options{IdleTimeout: time.Hour})
	defer closeRuntime(b, rt)
	stubs := registerTables(b, rt, pool)
	read := func(ctx context.Context, t *table) error {
		var v string
		return t.st.Storage().QueryRow(ctx, selectFirst).Scan(&v)
	}
	activate(b, stubs)
	lat := make([]time.Duration, 0, 4096)
	for b.Loop() {
		if n := len(lat) % pool; n == 0 && quiet {
			b.StopTimer()
			waitQuiet(b, rt, pool)
			b.StartTimer()
		}
		start := time.Now()
		if err := core.Do(ctx, stubs[len(lat)%pool], read); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	if q := rt.Stats().QuietDBs; !quiet && q != 0 {
		b.Fatalf("%d databases quiet: the resident objects' calls were not all to busy objects", q)
	}
	reportLatency(b, lat)
}

// benchCallParked is object=quiet's call to an object whose database is
// parked (SEMANTICS O11): its connection closed, its file kept. The call
// opens the connection again (a warm reopen, without the constructor) and
// reads row 1. Each round of the pool moves the runtime's clock
// (Options.Now, which otherwise stands still) past half IdleTimeout and
// waits until every database is parked.
func benchCallParked(b *testing.B) {
	const pool = 256
	ctx := context.Background()
	var ahead atomic.Int64
	start := time.Now()
	rt := openRuntime(b, core.Options{IdleTimeout: time.Hour,
		Now: func() time.Time { return start.Add(time.Duration(ahead.Load())) }})
	defer closeRuntime(b, rt)
	stubs := registerTables(b, rt, pool)
	read := func(ctx context.Context, t *table) error {
		var v string
		return t.st.Storage().QueryRow(ctx, selectFirst).Scan(&v)
	}
	activate(b, stubs)
	lat := make([]time.Duration, 0, 4096)
	for b.Loop() {
		if len(lat)%pool == 0 {
			b.StopTimer()
			ahead.Add(int64(31 * time.Minute)) // past half IdleTimeout, short of IdleTimeout
			waitParked(b, rt, pool)
			b.StartTimer()
		}
		start := time.Now()
		if err := core.Do(ctx, stubs[len(lat)%pool], read); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	if c := rt.Stats().Constructs; c != pool {
		b.Fatalf("%d constructor runs for %d objects: a parked object was evicted", c, pool)
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

// benchActivateBare is object=evicted's baseline: bare SQLite reopens the
// same files, as the runtime opens them (synchronous=FULL, busy_timeout),
// and reads row 1, as the constructor does. The latency is of the open and
// the read; the close (SQLite checkpoints the file) is not in it.
func benchActivateBare(b *testing.B) {
	const pool = 256
	dir := b.TempDir()
	rt := openRuntime(b, core.Options{Dir: dir})
	activate(b, registerTables(b, rt, pool))
	closeRuntime(b, rt)
	files, err := objectFiles(dir, "tables", pool)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 4096)
	for b.Loop() {
		start := time.Now()
		u := url.URL{Scheme: "file", Path: files[len(lat)%pool]}
		db, err := sql.Open("sqlite", u.String()+"?_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
		if err != nil {
			b.Fatal(err)
		}
		var v string
		if err := db.QueryRow(selectFirst).Scan(&v); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, lat)
}

// benchActivateHistory measures an object that has written mb MiB over its
// life (rows of 4 KiB, 16 to a turn, one object), then left memory.
// history=0MB is a new object with one row: the others should cost what it
// costs, however old they are.
//
// after=eviction is a running server's case: the runtime holds at most one
// open database (MaxOpenObjects 1), so a call to a small second object
// evicts the old one (untimed, waited for until its database is closed),
// and the timed call activates it again (p50-activate-us).
//
// after=restart is a process's first call to the object: each round opens a
// runtime over the directory (untimed), activates the object
// (p50-activate-us) and closes the runtime, which closes its database
// (p50-close-us). The first open of a file by a runtime checks its headers
// only; SQLite's quick check, which reads every page, runs in the
// background, and the close stops it if it is still running.
func benchActivateHistory(b *testing.B, mb int, afterRestart bool) {
	dir := b.TempDir()
	ctx := context.Background()
	rt := openRuntime(b, core.Options{Dir: dir})
	s := registerTables(b, rt, 1)[0]
	activate(b, []*core.Stub[*table]{s})
	row := strings.Repeat("h", 4096)
	for range mb * 16 { // 16 turns of 16 rows of 4 KiB per MiB
		err := core.Do(ctx, s, func(ctx context.Context, t *table) error {
			for range 16 {
				if _, err := t.st.Storage().Exec(ctx, insertRow, row); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	closeRuntime(b, rt)
	b.ReportAllocs()
	var act, cl []time.Duration
	if !afterRestart {
		rt := openRuntime(b, core.Options{Dir: dir, MaxOpenObjects: 1})
		defer closeRuntime(b, rt)
		stubs := registerTables(b, rt, 2) // stubs[0] is the old object, stubs[1] a new one
		activate(b, stubs[:1])
		for b.Loop() {
			b.StopTimer()
			if err := core.Do(ctx, stubs[1], nopCall); err != nil {
				b.Fatal(err)
			}
			waitOpenDBs(b, rt, 1)
			b.StartTimer()
			start := time.Now()
			if err := core.Do(ctx, stubs[0], nopCall); err != nil {
				b.Fatal(err)
			}
			act = append(act, time.Since(start))
			b.StopTimer()
			waitOpenDBs(b, rt, 1)
			b.StartTimer()
		}
		b.ReportMetric(float64(percentile(act, 0.50))/float64(time.Microsecond), "p50-activate-us")
		return
	}
	for b.Loop() {
		b.StopTimer()
		rt := openRuntime(b, core.Options{Dir: dir})
		s := registerTables(b, rt, 1)[0]
		b.StartTimer()
		start := time.Now()
		if err := core.Do(ctx, s, nopCall); err != nil {
			b.Fatal(err)
		}
		act = append(act, time.Since(start))
		start = time.Now()
		closeRuntime(b, rt)
		cl = append(cl, time.Since(start))
	}
	b.ReportMetric(float64(percentile(act, 0.50))/float64(time.Microsecond), "p50-activate-us")
	b.ReportMetric(float64(percentile(cl, 0.50))/float64(time.Microsecond), "p50-close-us")
}

// waitOpenDBs waits until the runtime has n object databases open: an
// evicted database closes in the background.
func waitOpenDBs(b *testing.B, rt *core.Runtime, n int64) {
	deadline := time.Now().Add(10 * time.Second)
	for rt.Stats().OpenDBs != n {
		if time.Now().After(deadline) {
			b.Fatalf("%d databases open, want %d", rt.Stats().OpenDBs, n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// largeRows is the row count of the rows= cases: with rows of 230 bytes, a
// database of about 25 MB.
const largeRows = 100_000

// benchActivateRows measures a process's first call to an object holding
// 100,000 rows (about 25 MB, its log checkpointed), as after=restart does
// (p50-activate-us: each round opens a runtime over the directory, untimed,
// times the first call, and closes it, untimed). The object is built once
// per process. impl=bare is its baseline over the same file: bare SQLite
// opens it as the runtime does (synchronous=FULL, busy_timeout) and reads
// row 1, as the constructor does; the close is not timed. cpu-us/op is the
// process's CPU time over the timed parts, per activation: the figure a
// loaded machine disturbs least. The first
// activation should cost what the bare open and read cost, whatever the
// file's size: the full check of the file runs off the request path.
func benchActivateRows(b *testing.B, bare bool) {
	d := sharedDirFor(b, "rows-"+strconv.Itoa(largeRows), func(dir string) error {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			return err
		}
		ns, err := core.Register(rt, "tables", newTable)
		if err != nil {
			return errors.Join(err, rt.Close())
		}
		s, err := ns.Get(objName(0))
		row := strings.Repeat("r", 230)
		for i := 0; err == nil && i < largeRows; i += 1000 {
			err = core.Do(context.Background(), s, func(ctx context.Context, t *table) error {
				for range 1000 {
					if _, err := t.st.Storage().Exec(ctx, insertRow, row); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return errors.Join(err, rt.Close())
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	files, err := objectFiles(d.path, "tables", 1)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	var act []time.Duration
	var cpu time.Duration // the process's, over the timed parts
	for b.Loop() {
		if bare {
			u := url.URL{Scheme: "file", Path: files[0]}
			start, cpu0 := time.Now(), cpuTime()
			db, err := sql.Open("sqlite", u.String()+"?_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
			if err != nil {
				b.Fatal(err)
			}
			var v string
			if err := db.QueryRow(selectFirst).Scan(&v); err != nil {
				b.Fatal(err)
			}
			act = append(act, time.Since(start))
			cpu += cpuTime() - cpu0
			b.StopTimer()
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			continue
		}
		b.StopTimer()
		rt := openRuntime(b, core.Options{Dir: d.path})
		s := registerTables(b, rt, 1)[0]
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		if err := core.Do(ctx, s, nopCall); err != nil {
			b.Fatal(err)
		}
		act = append(act, time.Since(start))
		cpu += cpuTime() - cpu0
		b.StopTimer()
		closeRuntime(b, rt)
		b.StartTimer()
	}
	b.ReportMetric(float64(percentile(act, 0.50))/float64(time.Microsecond), "p50-activate-us")
	reportCPU(b, cpu, len(act))
}
