package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// BenchmarkResident measures the memory that resident idle objects with
// storage hold. Each round opens a runtime, makes 1,000 objects resident
// (the constructor creates the table and inserts a row, then one call
// inserts another), moves the runtime's clock (Options.Now, which
// otherwise stands still) 2 s past the calls, waits until every database is
// quiet (Stats.QuietDBs: a second after an object's last call, its database
// gives back SQLite's page cache, its prepared statements and its lookaside
// allocator; it is parked only after half IdleTimeout, 30 min), and
// reads the memory in use before and after, with a GC forced and freed
// memory returned to the OS before each reading:
//
//   - B/resident-object: growth of the Go heap and stacks in use
//     (HeapInuse+StackInuse) per object: the runtime's structures, the
//     instance, database/sql's connection.
//   - rss-B/resident-object: growth of the process's resident set
//     (/proc/self/statm) per object. It adds what the Go heap does not
//     see: SQLite's own memory (modernc.org/libc allocates it outside the Go
//     heap: the connection, its schema, its thread state, the WAL index).
//   - fds/resident-object: file descriptors per object.
//
// Measured on linux/amd64: about 100 KB per object (161 KB before idle
// databases gave their memory back; bare SQLite, BenchmarkResidentBare,
// 142 KB with its page cache and statements), 7 KB of it in the Go heap.
// What stays: the WAL index, 32 KiB in the connection's memory; the
// connection's thread state, about 25 KiB; the connection itself (pager,
// B-tree, WAL, a page-sized buffer) and its schema. Two file descriptors
// per object (database and WAL, against three for bare SQLite): the
// connection holds its file in SQLite's exclusive locking mode, which keeps
// the WAL index in its memory instead of a -shm file (as much memory, one
// descriptor less); inspection, backup and the background quick check read
// the file through the object's gate.
//
// The objects stay resident because they stay open: IdleTimeout is an
// hour, and 1,000 is under the bound on open databases,
// Options.MaxOpenObjects, whose default is sized by the machine (the
// descriptor limit at 2 per object, and an eighth of memory at 384 KiB per
// object; Stats().MaxOpenObjects says what it is). That bound is what caps
// this memory: a server full of idle objects holds MaxOpenObjects times
// rss-B/resident-object, plus two file descriptors per object; an object
// called within the last second holds its page cache besides (up to 64
// pages, about 8 KiB each). Past the bound, activating one more object
// evicts the least recently used idle one first, paying a database close
// on that call (see BenchmarkActivate/object=evicted-lru).
//
// ns/op, B/op and allocs/op are per round of 1,000 objects.
func BenchmarkResident(b *testing.B) { benchResident(b, false) }

// BenchmarkResidentParked is BenchmarkResident with the objects' databases
// parked (SEMANTICS O11): after the databases are quiet, the runtime's
// clock (Options.Now) moves 31 min past the calls, past half IdleTimeout
// (30 min), after which an idle object's database closes its connection
// and keeps its file locked in one descriptor, and the readings are taken
// once every database is parked (Stats.ParkedDBs). The objects stay
// resident (IdleTimeout is an hour).
//
// Measured on linux/amd64 at load average 15-19, medians of 3: about 5 KB
// of RSS per object (about what the Go heap grows by: the runtime's
// structures and the instance; SQLite keeps nothing for a parked database)
// and one file descriptor, against 117 KB and two for an object whose
// database is only quiet, and 142 KB and three for bare SQLite, in the same
// run. Its next call opens the connection again: a warm reopen.
func BenchmarkResidentParked(b *testing.B) { benchResident(b, true) }

func benchResident(b *testing.B, park bool) {
	const objects = 1000
	ctx := context.Background()
	b.ReportAllocs()
	var heap, rss, fds []float64
	for b.Loop() {
		b.StopTimer()
		// The runtime's clock stands still but where the benchmark moves it, so that how long the
		// objects have been idle does not depend on how long the calls took.
		var ahead atomic.Int64
		start := time.Now()
		rt := openRuntime(b, core.Options{IdleTimeout: time.Hour,
			Now: func() time.Time { return start.Add(time.Duration(ahead.Load())) }})
		stubs := registerTables(b, rt, objects)
		heap0, rss0 := memInUse(b)
		fd0 := openFDs(b)
		b.StartTimer()

		err := each(objects, 16, func(i int) error { return core.Do(ctx, stubs[i], insertCall) })

		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		ahead.Store(int64(2 * time.Second))
		waitQuiet(b, rt, objects)
		if park {
			ahead.Store(int64(31 * time.Minute))
			waitParked(b, rt, objects)
		}
		heap1, rss1 := memInUse(b)
		fds = append(fds, float64(openFDs(b)-fd0)/objects)
		if st := rt.Stats(); st.Resident != objects || st.OpenDBs != objects || park != (st.ParkedDBs == objects) {
			b.Fatalf("%d objects resident and %d databases open (%d parked), want %d (parked: %v)", st.Resident, st.OpenDBs, st.ParkedDBs, objects, park)
		}
		heap = append(heap, float64(heap1-heap0)/objects)
		rss = append(rss, float64(rss1-rss0)/objects)
		runtime.KeepAlive(stubs)
		closeRuntime(b, rt)
		b.StartTimer()
	}
	b.ReportMetric(median(heap), "B/resident-object")
	b.ReportMetric(median(rss), "rss-B/resident-object")
	b.ReportMetric(median(fds), "fds/resident-object")
}

// waitParked waits until n open databases are parked (Stats.ParkedDBs).
func waitParked(b *testing.B, rt *core.Runtime, n int64) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for rt.Stats().ParkedDBs < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d databases parked after a minute", rt.Stats().ParkedDBs, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitQuiet waits until n open databases have given their memory back (Stats.QuietDBs), which the
// runtime does a second after an object's last call.
func waitQuiet(b *testing.B, rt *core.Runtime, n int64) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for rt.Stats().QuietDBs < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d databases quiet after a minute", rt.Stats().QuietDBs, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkResidentBare is BenchmarkResident's baseline: 1,000 databases
// opened by bare SQLite with its default settings (WAL, synchronous=FULL),
// each holding the table object's table with one row inserted, and kept
// open: what an open idle database costs without the runtime's settings.
func BenchmarkResidentBare(b *testing.B) {
	const objects = 1000
	var rss, fds []float64
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		dbs := make([]*bareDB, objects)
		_, rss0 := memInUse(b)
		fd0 := openFDs(b)
		b.StartTimer()
		err := each(objects, 16, func(i int) error {
			db, err := openBare(filepath.Join(dir, strconv.Itoa(i)+".sqlite"))
			if err == nil {
				dbs[i] = db
				_, err = db.ins.Exec(payload)
			}
			return err
		})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		_, rss1 := memInUse(b)
		rss = append(rss, float64(rss1-rss0)/objects)
		fds = append(fds, float64(openFDs(b)-fd0)/objects)
		for _, db := range dbs {
			db.close(b)
		}
		b.StartTimer()
	}
	b.ReportMetric(median(rss), "rss-B/resident-object")
	b.ReportMetric(median(fds), "fds/resident-object")
}

// openFDs is the number of file descriptors the process has open.
func openFDs(b *testing.B) int {
	b.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}

// memInUse returns the Go heap and stacks in use, and the resident set
// size, after a GC that returns freed memory to the OS.
func memInUse(b *testing.B) (heap, rss int64) {
	b.Helper()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("no RSS: %v", err)
	}
	fields := bytes.Fields(statm)
	if len(fields) < 2 {
		b.Fatalf("/proc/self/statm: %q", statm)
	}
	pages, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		b.Fatalf("/proc/self/statm: %v", err)
	}
	return int64(ms.HeapInuse + ms.StackInuse), pages * int64(os.Getpagesize())
}
