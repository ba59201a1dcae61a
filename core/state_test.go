package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// NewUniqueID names objects nobody can guess: random, distinct, valid, and
// the same object under that name after a restart.
func TestNamespace_NewUniqueID(t *testing.T) {
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	ns := register(t, rt)
	seen := map[string]bool{}
	for range 1000 {
		id := ns.NewUniqueID()
		require.Len(t, id, 26)
		require.Regexp(t, "^[A-Z2-7]{26}$", id)
		require.False(t, seen[id])
		seen[id] = true
	}
	s := get(t, ns, ns.NewUniqueID())
	require.False(t, seen[s.Name()])
	setStock(t, s, 42)
	require.NoError(t, rt.Close())

	rt = openRT(t, core.Options{Dir: dir})
	again := get(t, register(t, rt), s.Name())
	require.Equal(t, s.ID(), again.ID())
	require.Equal(t, 42, stockOf(t, again))
}

// config is an object whose constructor loads its settings from
// "upstream" (a wait that would open the gate) inside BlockConcurrencyWhile.
type config struct {
	st     *core.State
	loaded string
}

// BlockConcurrencyWhile keeps the gate closed while its function waits:
// calls made meanwhile queue, and each sees the object initialised; the
// wait is not cut short.
func TestState_BlockConcurrencyWhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		var order []string
		var mu sync.Mutex
		note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
		ns, err := core.Register(rt, "config", func(ctx context.Context, st *core.State) (*config, error) {
			c := &config{st: st}
			return c, st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
				note("load")
				if err := st.Sleep(ctx, 5*time.Second); err != nil { // the upstream call
					return err
				}
				_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS seen(n INTEGER)") // storage works here
				c.loaded = "v1"
				note("loaded")
				return err
			})
		})
		require.NoError(t, err)
		s := mustGet(t, ns, "c")
		start := time.Now()
		var wg sync.WaitGroup
		got := make([]string, 3)
		for i := range 3 {
			wg.Go(func() {
				v, err := core.Call(context.Background(), s, func(ctx context.Context, c *config) (string, error) {
					note("call")
					_, err := c.st.Storage().Exec(ctx, "INSERT INTO seen VALUES (1)")
					return c.loaded, err
				})
				require.NoError(t, err)
				got[i] = v
			})
		}
		wg.Wait()
		require.Equal(t, []string{"v1", "v1", "v1"}, got)
		require.Equal(t, []string{"load", "loaded", "call", "call", "call"}, order)
		require.Equal(t, 5*time.Second, time.Since(start))
		require.EqualValues(t, 1, rt.Stats().Constructs)
	})
}

// A call to another object from inside BlockConcurrencyWhile keeps the
// caller's gate closed: a call back into the caller fails at once with
// ErrDeadlock instead of running inside the block.
func TestState_BlockConcurrencyWhileCallsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		ns := register(t, rt)
		a, b := get(t, ns, "a"), get(t, ns, "b")
		err := core.Do(context.Background(), a, func(ctx context.Context, it *item) error {
			return it.st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
				n, err := core.Call(ctx, b, func(ctx context.Context, _ *item) (int, error) { return 7, nil })
				require.NoError(t, err)
				require.Equal(t, 7, n)
				return core.Do(ctx, b, func(ctx context.Context, _ *item) error {
					return core.Do(ctx, a, func(context.Context, *item) error { return nil })
				})
			})
		})
		require.ErrorIs(t, err, core.ErrDeadlock)
		require.ErrorIs(t, err, core.ErrObjectReset)
	})
}

// A failing or timed-out BlockConcurrencyWhile resets the object, as the
// original's does: the turn fails and rolls back even if its code goes on
// and returns nil, the instance is dropped, and the next call runs the
// constructor again.
func TestState_BlockConcurrencyWhileFailureResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		s := get(t, register(t, rt), "a")
		setStock(t, s, 5)
		var blockErr error
		err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
			it.memo = 1
			if err := it.setStock(ctx, 6); err != nil {
				return err
			}
			blockErr = it.st.BlockConcurrencyWhile(ctx, func(context.Context) error { return errors.New("upstream refused") })
			return nil // the code ignores the error: the turn fails all the same
		})
		require.ErrorIs(t, blockErr, core.ErrObjectReset)
		require.ErrorContains(t, blockErr, "upstream refused")
		require.ErrorIs(t, err, core.ErrObjectReset)
		require.True(t, errors.As(err, new(*core.RemoteError)))
		require.Equal(t, 5, stockOf(t, s), "rolled back")
		memo, err := core.Call(context.Background(), s, func(_ context.Context, it *item) (int, error) { return it.memo, nil })
		require.NoError(t, err)
		require.Zero(t, memo, "a new instance")
		require.EqualValues(t, 2, rt.Stats().Constructs)

		// Over the time limit: fn's context ends at 30 s and the object resets.
		start := time.Now()
		err = core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
			return it.st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			})
		})
		require.ErrorIs(t, err, core.ErrObjectReset)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, core.BlockConcurrencyTimeout, time.Since(start))
		// A function that ignores its context and overstays fails too.
		err = core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
			return it.st.BlockConcurrencyWhile(ctx, func(context.Context) error {
				time.Sleep(core.BlockConcurrencyTimeout + time.Second)
				return it.setStock(ctx, 9)
			})
		})
		require.ErrorIs(t, err, core.ErrObjectReset)
		require.ErrorContains(t, err, "over the limit of 30s")
		require.Equal(t, 5, stockOf(t, s))
		require.EqualValues(t, 4, rt.Stats().Constructs)

		st, err := core.Call(context.Background(), s, func(_ context.Context, it *item) (*core.State, error) { return it.st, nil })
		require.NoError(t, err)
		require.ErrorIs(t, st.BlockConcurrencyWhile(context.Background(), func(context.Context) error { return nil }), core.ErrNotInTurn)
	})
}
