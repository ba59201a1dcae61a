package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// One clock: State.Now and idle eviction follow
// Options.Now, as alarms and schedules do.

// shiftedClock is an Options.Now that runs offset ahead of time.Now.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *shiftedClock) add(d time.Duration) { c.offset.Add(int64(d)) }

type plainObj struct{ st *core.State }

func TestState_NowFollowsOptionsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clock shiftedClock
		rt := coretest.Open(t, core.Options{Now: clock.now})
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) { return &plainObj{st: st}, nil })
		require.NoError(t, err)
		stub, err := ns.Get("p1")
		require.NoError(t, err)
		for _, shift := range []time.Duration{0, time.Hour, -3 * time.Hour} {
			clock.add(shift)
			got, err := core.Call(context.Background(), stub, func(_ context.Context, p *plainObj) (time.Time, error) { return p.st.Now(), nil })
			require.NoError(t, err)
			if want := clock.now(); !got.Equal(want) {
				t.Errorf("State.Now with Options.Now %v ahead: got %v, want %v", time.Duration(clock.offset.Load()), got, want)
			}
		}
	})
}

func TestRuntime_IdleEvictionFollowsOptionsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clock shiftedClock
		rt := coretest.Open(t, core.Options{IdleTimeout: 10 * time.Second, Now: clock.now})
		var ctors atomic.Int64
		ns, err := core.Register(rt, "plain", func(_ context.Context, st *core.State) (*plainObj, error) {
			ctors.Add(1)
			return &plainObj{st: st}, nil
		})
		require.NoError(t, err)
		stub, err := ns.Get("p1")
		require.NoError(t, err)
		use := func() {
			require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, p *plainObj) error {
				_, err := p.st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS t(x)")
				return err
			}))
		}
		use()
		require.Equal(t, int64(1), rt.Stats().Resident)

		clock.add(11 * time.Second) // idle for 11 s by Options.Now
		time.Sleep(time.Second)     // and 1 s by time.Now: one janitor round
		synctest.Wait()
		if got := rt.Stats().Resident; got != 0 {
			t.Errorf("objects resident 11 s (by Options.Now) after their last use, IdleTimeout 10 s: got %d, want 0", got)
		}
		use()
		if got := ctors.Load(); got != 2 {
			t.Errorf("constructor runs after the idle eviction: got %d, want 2", got)
		}
	})
}
