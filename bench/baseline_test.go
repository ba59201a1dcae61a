package bench

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	_ "modernc.org/sqlite" // the driver the runtime uses
)

// batchSize is the inserts per transaction of txn=batched.
const batchSize = 64

// BenchmarkBaseline runs the runtime's INSERT on bare *sql.DBs: the same
// driver, WAL, synchronous=FULL, one connection each, a prepared
// statement, no runtime. All report per insert.
//
//   - txn=per-insert commits (and fsyncs) every insert on one file, as the
//     runtime must for one caller: compare BenchmarkWrite/telemetry=off/sync=FULL/callers=1.
//   - txn=batched commits every 64 inserts, as group commit can at best:
//     compare BenchmarkWrite/telemetry=off/sync=FULL/callers=64, by calls/s
//     and by cpu-us/op (the figure a loaded machine disturbs least).
//   - txn=per-insert/files=1000/callers=64 spreads one-insert transactions
//     over 1,000 files from 64 goroutines, which is what the disk allows
//     across files: compare BenchmarkManyKeys.
//   - gate=fifo/callers=N runs an empty call through a bare FIFO hand-off
//     gate (a mutex and a queue of parked waiters, no runtime) from N
//     goroutines: compare BenchmarkForward/telemetry=off/callers=N.
func BenchmarkBaseline(b *testing.B) {
	for _, callers := range callerCounts {
		b.Run("gate=fifo/callers="+strconv.Itoa(callers), func(b *testing.B) {
			var g fifoGate
			var sink atomic.Int64
			runCallers(b, callers, "calls/s", func(context.Context) error {
				g.do(func() { sink.Add(1) })
				return nil
			})
		})
	}
	b.Run("txn=per-insert", func(b *testing.B) {
		db := mustOpenBare(b, filepath.Join(b.TempDir(), "bare.sqlite"))
		defer db.close(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := db.ins.Exec(payload); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, b.N, "calls/s")
	})
	b.Run("txn=batched", func(b *testing.B) {
		db := mustOpenBare(b, filepath.Join(b.TempDir(), "bare.sqlite"))
		defer db.close(b)
		b.ReportAllocs()
		var tx *sql.Tx
		var stmt *sql.Stmt
		n := 0
		cpu := cpuTime()
		for b.Loop() {
			if tx == nil {
				var err error
				if tx, err = db.db.Begin(); err != nil {
					b.Fatal(err)
				}
				stmt = tx.Stmt(db.ins)
			}
			if _, err := stmt.Exec(payload); err != nil {
				b.Fatal(err)
			}
			if n++; n%batchSize == 0 {
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				tx = nil
			}
		}
		// The last partial batch commits with the timer stopped: one fsync
		// out of b.N/64.
		if tx != nil {
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, b.N, "calls/s")
		reportCPU(b, cpuTime()-cpu, b.N)
	})

	// The files are opened once: RunParallel runs the function again for
	// each iteration count it tries.
	const files, callers = 1000, 64
	dir := b.TempDir()
	dbs := make([]*bareDB, files)
	err := each(files, 64, func(i int) (err error) {
		dbs[i], err = openBare(filepath.Join(dir, strconv.Itoa(i)+".sqlite"))
		return err
	})
	defer func() {
		for _, db := range dbs {
			db.close(b)
		}
	}()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("txn=per-insert/files=1000/callers=64", func(b *testing.B) {
		var next atomic.Int64
		runCallers(b, callers, "calls/s", func(context.Context) error {
			_, err := dbs[int(next.Add(1))%files].ins.Exec(payload)
			return err
		})
	})
}

// bareDB is a database opened as the runtime opens an object's, with the
// table created and the INSERT prepared.
type bareDB struct {
	db  *sql.DB
	ins *sql.Stmt
}

// openBare opens the database at path.
func openBare(path string) (*bareDB, error) { return openBareWith(path, "") }

// openBareExclusive opens the database at path in SQLite's exclusive locking mode, as the runtime
// holds an object's file: two descriptors (database and WAL), the WAL index in memory.
func openBareExclusive(path string) (*bareDB, error) {
	return openBareWith(path, "_pragma=locking_mode(EXCLUSIVE)&")
}

// openBareWith opens the database at path with pragmas (DSN parameters, each ending in "&") first.
func openBareWith(path, pragmas string) (*bareDB, error) {
	u := url.URL{Scheme: "file", Path: path}
	db, err := sql.Open("sqlite", u.String()+"?"+pragmas+"_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if _, err := db.Exec(createTable); err != nil {
		db.Close()
		return nil, err
	}
	ins, err := db.Prepare(insertRow)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &bareDB{db: db, ins: ins}, nil
}

func mustOpenBare(b *testing.B, path string) *bareDB {
	b.Helper()
	db, err := openBare(path)
	if err != nil {
		b.Fatal(err)
	}
	return db
}

func (d *bareDB) close(b *testing.B) {
	if d == nil {
		return
	}
	if err := errors.Join(d.ins.Close(), d.db.Close()); err != nil {
		b.Error(err)
	}
}

// fifoGate is the bare gate the turn gate is measured against: a mutex and
// a FIFO of parked waiters (recycled, so that it allocates nothing); the
// holder hands the gate to the first waiter directly. The call runs on the
// caller's goroutine, and there is nothing else: no context, no storage,
// no output.
type fifoGate struct {
	mu         sync.Mutex
	held       bool
	head, tail *gateWaiter
	free       []*gateWaiter
}

type gateWaiter struct {
	ch   chan struct{}
	next *gateWaiter
}

func (g *fifoGate) do(fn func()) {
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
	} else {
		var w *gateWaiter
		if n := len(g.free); n > 0 {
			w, g.free = g.free[n-1], g.free[:n-1]
		} else {
			w = &gateWaiter{ch: make(chan struct{}, 1)}
		}
		if g.tail == nil {
			g.head = w
		} else {
			g.tail.next = w
		}
		g.tail = w
		g.mu.Unlock()
		<-w.ch
		g.mu.Lock()
		g.free = append(g.free, w)
		g.mu.Unlock()
	}
	fn()
	g.mu.Lock()
	w := g.head
	if w == nil {
		g.held = false
		g.mu.Unlock()
		return
	}
	if g.head = w.next; g.head == nil {
		g.tail = nil
	}
	w.next = nil
	g.mu.Unlock()
	w.ch <- struct{}{}
}
