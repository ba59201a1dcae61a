package core_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// readElsewhere reads the table t of the database at path on a connection of its own (SQLite's
// default VFS, no busy timeout), as another program would, and returns the count or the error.
func readElsewhere(path string) (int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRow("SELECT count(*) FROM t").Scan(&n)
	return n, err
}

// O11: with the default IdleTimeout, an object idle for 5 s (half IdleTimeout) has its database
// parked: the connection closed, the file kept and locked (no other connection reads it); the
// instance stays (no constructor runs again), its next call finds every row and reopens the
// database, and parking is not a use: the object is evicted IdleTimeout after its last call all
// the same.
func TestRuntime_IdleObjectParks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("databases park where their connection locks the file itself: Linux")
	}
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		stub, err := ns.Get("idle")
		require.NoError(t, err)
		path := filepath.Join(rt.Dir(), "plain", stub.ID()+".sqlite")
		insert := func() int { return insertRow(t, stub) }
		stats := func() core.Stats {
			synctest.Wait()
			return rt.Stats()
		}

		start := time.Now()
		insert()
		time.Sleep(4 * time.Second)
		if st := stats(); st.ParkedDBs != 0 || st.QuietDBs != 1 || st.OpenDBs != 1 {
			t.Fatalf("idle for 4 s: %d parked, %d quiet of %d open databases; want 0, 1 of 1", st.ParkedDBs, st.QuietDBs, st.OpenDBs)
		}
		time.Sleep(start.Add(5*time.Second + 500*time.Millisecond).Sub(time.Now()))
		if st := stats(); st.ParkedDBs != 1 || st.QuietDBs != 0 || st.OpenDBs != 1 || st.Resident != 1 {
			t.Fatalf("idle for 5.5 s: %d parked, %d quiet of %d open databases, %d resident; want 1, 0 of 1, 1",
				st.ParkedDBs, st.QuietDBs, st.OpenDBs, st.Resident)
		}
		if n, err := readElsewhere(path); err == nil || !strings.Contains(err.Error(), "locked") {
			t.Fatalf("another connection read the parked object's file: %d rows, %v; want SQLITE_BUSY", n, err)
		}
		if n := insert(); n != 2 {
			t.Fatalf("%d rows after parking, want 2", n)
		}
		if st := stats(); st.ParkedDBs != 0 || st.Constructs != 1 {
			t.Fatalf("called again: %d parked databases, %d constructor runs; want 0, 1 (the same instance)", st.ParkedDBs, st.Constructs)
		}

		// Parked again 5 s after that call, evicted 10 s after it (and a tick), not 10 s after parking.
		last := time.Now()
		time.Sleep(last.Add(9500 * time.Millisecond).Sub(time.Now()))
		if st := stats(); st.ParkedDBs != 1 || st.Resident != 1 {
			t.Fatalf("9.5 s after the last call: %d parked, %d resident; want 1, 1", st.ParkedDBs, st.Resident)
		}
		time.Sleep(last.Add(10*time.Second + 750*time.Millisecond).Sub(time.Now()))
		if st := stats(); st.ParkedDBs != 0 || st.OpenDBs != 0 || st.Resident != 0 {
			t.Fatalf("10.75 s after the last call: %d parked, %d open, %d resident; want all 0", st.ParkedDBs, st.OpenDBs, st.Resident)
		}
		if n, err := readElsewhere(path); err != nil || n != 2 {
			t.Fatalf("another connection after the eviction: %d rows, %v; want 2", n, err)
		}
	})
}

// O11: an object whose SQL made a TEMP table (which lives as long as the database's connection)
// is not parked: the table is still there after an idle spell.
func TestRuntime_TempTableKeepsTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{IdleTimeout: time.Minute})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		stub, err := ns.Get("scratch")
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, p *plainObj) error {
			_, err := p.st.Storage().Exec(ctx, "CREATE TEMP TABLE scratch AS SELECT 42 AS v")
			return err
		}))
		time.Sleep(40 * time.Second) // past half IdleTimeout, short of IdleTimeout
		synctest.Wait()
		if st := rt.Stats(); st.ParkedDBs != 0 || st.OpenDBs != 1 {
			t.Fatalf("idle for 40 s with a TEMP table: %d of %d open databases parked, want 0 of 1", st.ParkedDBs, st.OpenDBs)
		}
		v, err := core.Call(context.Background(), stub, func(ctx context.Context, p *plainObj) (int, error) {
			var v int
			err := p.st.Storage().QueryRow(ctx, "SELECT v FROM temp.scratch").Scan(&v)
			return v, err
		})
		if err != nil || v != 42 {
			t.Fatalf("the TEMP table after 40 s idle: %d, %v; want 42", v, err)
		}
	})
}
