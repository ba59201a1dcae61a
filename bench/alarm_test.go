package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// firer is an object whose alarm does one storage write.
type firer struct {
	st    *core.State
	done  func(late time.Duration)
	rearm bool // the handler arms the alarm again, an hour ahead
}

func (f *firer) Alarm(ctx context.Context, info core.AlarmInfo) error {
	now := f.st.Now()
	late := now.Sub(info.Scheduled)
	if _, err := f.st.Storage().Exec(ctx, "INSERT INTO fired(at) VALUES (?)", now.UnixNano()); err != nil {
		return err
	}
	if f.rearm {
		if err := f.st.SetAlarm(ctx, now.Add(time.Hour)); err != nil {
			return err
		}
	}
	if f.done != nil {
		f.done(late)
	}
	return nil
}

func registerFirers(b *testing.B, rt *core.Runtime, done func(time.Duration), rearm bool) *core.Namespace[*firer] {
	b.Helper()
	ns, err := core.Register(rt, "firers", func(ctx context.Context, st *core.State) (*firer, error) {
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS fired(at INTEGER NOT NULL)")
		return &firer{st: st, done: done, rearm: rearm}, err
	})
	if err != nil {
		b.Fatal(err)
	}
	return ns
}

// armAll sets the alarm of objects o0..o(n-1) with 64 callers; at gives
// each object's time.
func armAll(b *testing.B, ns *core.Namespace[*firer], n int, at func(i int) time.Time) {
	b.Helper()
	err := each(n, 64, func(i int) error {
		s, err := ns.Get(fmt.Sprint("o", i))
		if err != nil {
			return err
		}
		return core.Do(context.Background(), s, func(ctx context.Context, f *firer) error { return f.st.SetAlarm(ctx, at(i)) })
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAlarmFire measures alarms fired per second over many objects
// (objects=1000, 10000, and 100000 with DURABLE_BENCH_LARGE=1), each with
// one due alarm whose handler does one durable storage write and arms the
// alarm again an hour ahead (in the same turn: one commit).
//
//   - impl=runtime: the objects are made and armed once per process
//     (buildFirers: copies of one object's file). Each round opens a runtime over the same
//     directory with its clock (Options.Now) two hours further ahead than
//     the last round's, so every alarm is due at once, on evicted objects.
//     The time measured runs from the namespace's registration (which
//     releases the due alarms) to the last handler's return: activation,
//     the handler's turn, its commit, and the evictions past
//     MaxOpenObjects (1,024; impl=runtime/cache=default: the default,
//     sized by the machine).
//   - impl=bare-reopen: bare SQLite over the same files, 64 goroutines:
//     open, insert, commit, close (SQLite checkpoints it) for each file.
//   - impl=bare-open: insert and commit over files already open, 64
//     goroutines: the disk's fsync rate across files. It keeps at most
//     1,000 files open (three file descriptors each), the first ones.
func BenchmarkAlarmFire(b *testing.B) {
	for _, n := range scales() {
		b.Run("objects="+strconv.Itoa(n), func(b *testing.B) {
			d := sharedDirFor(b, "firers-"+strconv.Itoa(n), func(dir string) error { return buildFirers(b, dir, n) })
			d.mu.Lock()
			defer d.mu.Unlock()
			b.Run("impl=runtime", func(b *testing.B) { benchAlarmFire(b, d, n, maxOpen) })
			b.Run("impl=runtime/cache=default", func(b *testing.B) { benchAlarmFire(b, d, n, 0) })
			b.Run("impl=bare-reopen", func(b *testing.B) { benchFireBare(b, d.path, n, false) })
			b.Run("impl=bare-open", func(b *testing.B) { benchFireBare(b, d.path, min(n, 1000), true) })
		})
	}
}

// buildFirers makes objects o0..o(n-1) in dir, each with its alarm armed an
// hour ahead: a runtime makes o0, whose database file (its log folded in) is
// then copied for each of the others, with the name in its meta table
// changed; the runtime's index, removed, is rebuilt from the files by the
// next Open (SEMANTICS O4), which the function checks. Creating each object
// through a runtime costs a file and two commits each, minutes for 10,000
// objects; the copies are the same files, made in seconds.
func buildFirers(b *testing.B, dir string, n int) error {
	rt, err := core.Open(core.Options{Dir: dir, MaxOpenObjects: maxOpen})
	if err != nil {
		return err
	}
	ns := registerFirers(b, rt, nil, false)
	later := time.Now().Add(time.Hour)
	armAll(b, ns, 1, func(int) time.Time { return later })
	ids := make([]string, n)
	for i := range ids {
		s, err := ns.Get(fmt.Sprint("o", i))
		if err != nil {
			return errors.Join(err, rt.Close())
		}
		ids[i] = s.ID()
	}
	if err := rt.Close(); err != nil {
		return err
	}
	file := func(i int) string { return filepath.Join(dir, "firers", ids[i]+".sqlite") }
	bare := func(path, query string, args ...any) error {
		db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=synchronous(OFF)")
		if err != nil {
			return err
		}
		_, err = db.Exec(query, args...)
		return errors.Join(err, db.Close())
	}
	if err := bare(file(0), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return err
	}
	template, err := os.ReadFile(file(0))
	if err != nil {
		return err
	}
	err = each(n-1, 2*runtime.GOMAXPROCS(0), func(i int) error {
		path := file(i + 1)
		if err := os.WriteFile(path, template, 0o644); err != nil {
			return err
		}
		return bare(path, "UPDATE _durable_meta SET v = ? WHERE k = 'name'", fmt.Sprint("o", i+1))
	})
	if err != nil {
		return err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(dir, "_runtime.sqlite"+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if rt, err = core.Open(core.Options{Dir: dir, MaxOpenObjects: maxOpen}); err != nil {
		return err
	}
	if st := rt.Stats(); st.Alarms != int64(n) {
		err = fmt.Errorf("%d alarms pending after the index was rebuilt from %d files", st.Alarms, n)
	}
	return errors.Join(err, rt.Close())
}

func benchAlarmFire(b *testing.B, d *sharedDir, objects, maxOpenObjects int) {
	// Every round's clock is two hours past the last one's, in this process
	// or an earlier one over the same directory: the handlers armed their
	// alarms an hour past it.
	var rates []float64
	for b.Loop() {
		b.StopTimer()
		shift, err := d.nextRound()
		if err != nil {
			b.Fatal(err)
		}
		rt, err := core.Open(core.Options{Dir: d.path, MaxOpenObjects: maxOpenObjects, Now: func() time.Time { return time.Now().Add(shift) }})
		if err != nil {
			b.Fatal(err)
		}
		var fired atomic.Int64
		all := make(chan struct{})
		b.StartTimer()
		start := time.Now()
		registerFirers(b, rt, func(time.Duration) {
			if fired.Add(1) == int64(objects) {
				close(all)
			}
		}, true)
		<-all
		elapsed := time.Since(start)
		b.StopTimer()
		rates = append(rates, float64(objects)/elapsed.Seconds())
		if err := rt.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(median(rates), "fires/s")
}

// benchFireBare does bare SQLite's part of a fire over the first n object
// files in dir: an insert into the handler's table, committed; with open,
// over databases opened before the timer starts.
func benchFireBare(b *testing.B, dir string, n int, open bool) {
	all, err := filepath.Glob(filepath.Join(dir, "firers", "*.sqlite"))
	if err != nil || len(all) < n {
		b.Fatalf("%d object files (%v), want %d", len(all), err, n)
	}
	files := all[:n]
	openDB := func(path string) (*sql.DB, *sql.Stmt, error) {
		u := url.URL{Scheme: "file", Path: path}
		db, err := sql.Open("sqlite", u.String()+"?_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(1)
		st, err := db.Prepare("INSERT INTO fired(at) VALUES (?)")
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, st, nil
	}
	var rates []float64
	for b.Loop() {
		b.StopTimer()
		type handle struct {
			db *sql.DB
			st *sql.Stmt
		}
		hs := make([]handle, n)
		if open {
			if err := each(n, 64, func(i int) (err error) {
				hs[i].db, hs[i].st, err = openDB(files[i])
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		err := each(n, 64, func(i int) error {
			h := hs[i]
			if !open {
				var err error
				if h.db, h.st, err = openDB(files[i]); err != nil {
					return err
				}
			}
			_, err := h.st.Exec(time.Now().UnixNano())
			if !open {
				err = errors.Join(err, h.st.Close(), h.db.Close())
			}
			return err
		})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		rates = append(rates, float64(n)/elapsed.Seconds())
		for _, h := range hs {
			if h.db != nil {
				h.st.Close()
				h.db.Close()
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(median(rates), "fires/s")
}

// BenchmarkAlarmLateness measures scheduling precision under no other
// load: 1,000 alarms due over 2 s, and the p50 and p99 of (time the
// handler starts - time the alarm was due).
func BenchmarkAlarmLateness(b *testing.B) {
	const alarms = 1000
	for b.Loop() {
		b.StopTimer()
		rt, err := core.Open(core.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		lates := make([]time.Duration, 0, alarms)
		all := make(chan struct{})
		ns := registerFirers(b, rt, func(late time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			lates = append(lates, late)
			if len(lates) == alarms {
				close(all)
			}
		}, false)
		// Create the objects first (far future), then arm them over 2 s
		// starting 1 s after arming ends.
		far := time.Now().Add(time.Hour)
		armAll(b, ns, alarms, func(int) time.Time { return far })
		base := time.Now().Add(time.Second)
		armAll(b, ns, alarms, func(i int) time.Time { return base.Add(time.Duration(i) * 2 * time.Second / alarms) })
		if time.Now().After(base) {
			b.Fatalf("arming took longer than the 1 s margin")
		}
		b.StartTimer()
		<-all
		b.StopTimer()
		slices.Sort(lates)
		b.ReportMetric(float64(lates[len(lates)/2])/1e6, "p50-late-ms")
		b.ReportMetric(float64(lates[len(lates)*99/100])/1e6, "p99-late-ms")
		if err := rt.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkAlarmPending measures the runtime's memory per pending alarm:
// 100,000 alarms on evicted objects. A pending alarm must not keep its
// object in memory, so what a restarted runtime holds for it is one entry
// of the scheduler's heap. The runtime's index is filled directly (with
// the schema core creates) because creating 100,000 object files would
// measure the disk, not the runtime.
func BenchmarkAlarmPending(b *testing.B) {
	const pending = 100_000
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.Close(); err != nil { // creates the index
			b.Fatal(err)
		}
		fillIndex(b, filepath.Join(dir, "_runtime.sqlite"), pending)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		rt, err = core.Open(core.Options{Dir: dir})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := rt.Stats()
		if st.Alarms != pending || st.Resident != 0 {
			b.Fatalf("pending %d, resident %d; want %d, 0", st.Alarms, st.Resident, pending)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/pending, "B/pending-alarm")
		b.ReportMetric(float64(st.Resident), "resident-objects")
		if err := rt.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func fillIndex(b *testing.B, path string, n int) {
	b.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	stmt, err := tx.Prepare("INSERT INTO alarms(ns, id, name, at) VALUES ('firers', ?, ?, ?)")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now().Add(24 * time.Hour).UnixNano()
	for i := range n {
		name := fmt.Sprint("object-", i)
		if _, err := stmt.Exec(fmt.Sprintf("%032x", i), name, at+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}
