package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// O10: an object idle for a second keeps its database open but gives its memory back; a busier
// one keeps it; the next call finds every row; and quiescing is not a use: the object is evicted
// IdleTimeout after its last call all the same.
func TestRuntime_IdleObjectGivesMemoryBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{IdleTimeout: 10 * time.Second})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		idle, err := ns.Get("idle")
		require.NoError(t, err)
		busy, err := ns.Get("busy")
		require.NoError(t, err)
		insert := func(stub *core.Stub[*plainObj]) int { return insertRow(t, stub) }
		stats := func() (quiet, open, resident int64) {
			synctest.Wait()
			st := rt.Stats()
			return st.QuietDBs, st.OpenDBs, st.Resident
		}

		start := time.Now()
		insert(idle)
		insert(busy)
		if q, o, _ := stats(); q != 0 || o != 2 {
			t.Fatalf("just used: %d of %d open databases quiet, want 0 of 2", q, o)
		}
		for range 4 { // busy is called every half second, idle not at all
			time.Sleep(500 * time.Millisecond)
			insert(busy)
		}
		if q, o, _ := stats(); q != 1 || o != 2 {
			t.Fatalf("after 2 s: %d of %d open databases quiet, want 1 of 2 (the idle object's)", q, o)
		}
		time.Sleep(2 * time.Second) // busy is idle too now
		if q, _, _ := stats(); q != 2 {
			t.Fatalf("both idle for a second or more: %d databases quiet, want 2", q)
		}
		if n := insert(busy); n != 6 {
			t.Fatalf("%d rows after quiescing, want 6", n)
		}
		if q, o, _ := stats(); q != 1 || o != 2 {
			t.Fatalf("busy called again: %d of %d open databases quiet, want 1 of 2", q, o)
		}

		// idle was last called at start; it was quiesced at about start+1 s. It is evicted
		// IdleTimeout (and a tick) after start, not after the quiescing.
		time.Sleep(start.Add(10*time.Second + 750*time.Millisecond).Sub(time.Now()))
		// busy was last called at about start+4 s: idle for over 5 s, its database is parked (O11).
		wantQ, wantP := int64(0), int64(1)
		if runtime.GOOS != "linux" { // no parking
			wantQ, wantP = 1, 0
		}
		if q, o, r := stats(); r != 1 || o != 1 || q != wantQ || rt.Stats().ParkedDBs != wantP {
			t.Fatalf("10.75 s after its last call: %d objects resident, %d databases open (%d quiet, %d parked); want 1 and 1 (%d, %d): the idle object evicted, the busy one parked",
				r, o, q, rt.Stats().ParkedDBs, wantQ, wantP)
		}
		if n := insert(idle); n != 2 {
			t.Fatalf("%d rows after eviction, want 2", n)
		}
	})
}

// O10: calls that come at random gaps around the quiet delay, from several callers at once, each
// find every earlier write, and the count of quiet databases stays exact: all of them once the
// calls stop, none once the objects are evicted.
func TestRuntime_QuietAndBusyObjectsUnderConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{IdleTimeout: 10 * time.Second})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		const objects, callers, calls = 4, 8, 12
		stubs := make([]*core.Stub[*plainObj], objects)
		for i := range stubs {
			stubs[i], err = ns.Get(fmt.Sprint("o-", i))
			require.NoError(t, err)
		}
		increment := func(stub *core.Stub[*plainObj]) (int, error) {
			return core.Call(context.Background(), stub, func(ctx context.Context, p *plainObj) (int, error) {
				s := p.st.Storage()
				if _, err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS n(v INTEGER)"); err != nil {
					return 0, err
				}
				if _, err := s.Exec(ctx, "INSERT INTO n VALUES (1)"); err != nil {
					return 0, err
				}
				var n int
				err := s.QueryRow(ctx, "SELECT count(*) FROM n").Scan(&n)
				return n, err
			})
		}
		var wg sync.WaitGroup
		var made [objects]atomic.Int64
		for c := range callers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				for range calls {
					time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond) // either side of a second
					i := rng.IntN(objects)
					n, err := increment(stubs[i])
					if err != nil {
						t.Error(err)
						return
					}
					if done := made[i].Add(1); int64(n) < done {
						t.Errorf("object %d: %d rows after %d calls returned", i, n, done)
					}
				}
			})
		}
		wg.Wait()
		for i := range stubs {
			n, err := increment(stubs[i])
			require.NoError(t, err)
			if want := made[i].Load() + 1; int64(n) != want {
				t.Errorf("object %d: %d rows, want %d", i, n, want)
			}
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if st := rt.Stats(); st.QuietDBs != objects || st.OpenDBs != objects {
			t.Fatalf("idle 1.5 s: %d of %d open databases quiet, want %d of %d", st.QuietDBs, st.OpenDBs, objects, objects)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := rt.Stats(); st.QuietDBs != 0 || st.OpenDBs != 0 {
			t.Fatalf("evicted: %d of %d open databases quiet, want none open", st.QuietDBs, st.OpenDBs)
		}
	})
}

// O10: a turn that holds the gate past the quiet delay (its object was idle before it, and it
// waits inside, its transaction open) is not quiesced under it: the databases quiet stay 0 until it
// ends, and it finds its own writes.
func TestRuntime_RunningTurnIsNotQuiesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{IdleTimeout: 10 * time.Second})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		stub, err := ns.Get("slow")
		require.NoError(t, err)
		insert := func(ctx context.Context, p *plainObj) error {
			_, err := p.st.Storage().Exec(ctx, "INSERT INTO t VALUES (1)")
			return err
		}
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, p *plainObj) error {
			if _, err := p.st.Storage().Exec(ctx, "CREATE TABLE t(x)"); err != nil {
				return err
			}
			return insert(ctx, p)
		}))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(1), rt.Stats().QuietDBs, "idle for 2 s: its database quiet")

		entered, proceed := make(chan struct{}), make(chan struct{})
		got := make(chan int, 1)
		go func() {
			n, err := core.Call(context.Background(), stub, func(ctx context.Context, p *plainObj) (int, error) {
				if err := insert(ctx, p); err != nil {
					return 0, err
				}
				close(entered)
				<-proceed // holding the gate, the turn's transaction open
				if err := insert(ctx, p); err != nil {
					return 0, err
				}
				var n int
				err := p.st.Storage().QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
				return n, err
			})
			if err != nil {
				t.Error(err)
			}
			got <- n
		}()
		<-entered
		time.Sleep(3 * time.Second) // the janitor ticks a dozen times
		synctest.Wait()
		if q := rt.Stats().QuietDBs; q != 0 {
			t.Errorf("a turn running for 3 s: %d databases quiet, want 0", q)
		}
		close(proceed)
		if n := <-got; n != 3 {
			t.Errorf("the turn counts %d rows, want 3", n)
		}
	})
}

// S-O10, S-O8: an open object's database holds two file descriptors (the database and its log; the
// log's index is in memory, no -shm file), and holds its file alone; inspection and a read-only query
// of an open object still read what it committed, and the object serves again after them.
func TestRuntime_OpenObjectHoldsTwoDescriptors(t *testing.T) {
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(es)
	}
	dir := t.TempDir()
	ctx := context.Background()
	rt := openRuntime(t, core.Options{Dir: dir, IdleTimeout: time.Hour})
	ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
	require.NoError(t, err)
	const objects = 20
	stubs := make([]*core.Stub[*plainObj], objects)
	for i := range stubs {
		stubs[i], err = ns.Get(fmt.Sprint("o", i))
		require.NoError(t, err)
	}
	insertRow(t, stubs[0]) // the runtime's own files are open from here on
	before := fds()
	for _, s := range stubs[1:] {
		insertRow(t, s)
	}
	require.Equal(t, int64(objects), rt.Stats().OpenDBs)
	if got, want := fds()-before, 2*(objects-1); got != want {
		t.Fatalf("%d more descriptors for %d more open objects, want %d", got, objects-1, want)
	}
	shm, err := filepath.Glob(filepath.Join(dir, "plain", "*-shm"))
	require.NoError(t, err)
	require.Empty(t, shm, "no WAL index file while the objects are open")

	rep, err := rt.Admin().Inspect(ctx, "plain", "o1")
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(rep.Tables, func(tb core.TableInfo) bool { return tb.Name == "t" && tb.Rows == 1 }), "%+v", rep.Tables)
	res, err := rt.Admin().Query(ctx, "plain", "o2", 0, "SELECT count(*) FROM t")
	require.NoError(t, err)
	require.Equal(t, [][]any{{int64(1)}}, res.Rows)
	problems, err := rt.Admin().Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, 2, insertRow(t, stubs[1]), "the inspected object serves again, with every row")
	require.Equal(t, 2, insertRow(t, stubs[2]))
	shm, err = filepath.Glob(filepath.Join(dir, "plain", "*-shm"))
	require.NoError(t, err)
	require.Empty(t, shm, "inspection leaves no WAL index file behind")
}

// insertRow adds a row to the object's table t (made if need be) and returns how many it holds.
func insertRow(t *testing.T, stub *core.Stub[*plainObj]) int {
	t.Helper()
	n, err := core.Call(context.Background(), stub, func(ctx context.Context, p *plainObj) (int, error) {
		s := p.st.Storage()
		if _, err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS t(x)"); err != nil {
			return 0, err
		}
		if _, err := s.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			return 0, err
		}
		var n int
		err := s.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
		return n, err
	})
	require.NoError(t, err)
	return n
}
