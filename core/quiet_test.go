package core_test

import (
	"context"
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
		insert := func(stub *core.Stub[*plainObj]) int {
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
		if q, o, r := stats(); r != 1 || o != 1 || q != 1 {
			t.Fatalf("10.75 s after its last call: %d objects resident, %d databases open (%d quiet); want 1 and 1 (1): the idle object evicted, the busy one quiet again",
				r, o, q)
		}
		if n := insert(idle); n != 2 {
			t.Fatalf("%d rows after eviction, want 2", n)
		}
	})
}
