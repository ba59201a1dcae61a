package core_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// Self-deadlocks become errors: a call or
// TriggerAlarm from a turn to its own object opens the caller's gate, as
// Call does, and completes; a call that would wait for a gate held by a
// turn that is itself waiting, directly or through other objects, for the
// caller fails at once with ErrDeadlock, whatever ctx was passed.
//
// The tests run in synctest bubbles, so that a deadlock is found in fake
// time; each then ends the deadlock by cancelling the ctx the waits were
// given (not the turn's), so that the bubble can end.

// peer is an object that counts its alarm's runs.
type peer struct {
	st     *core.State
	alarms *int
}

func (p *peer) Alarm(context.Context, core.AlarmInfo) error {
	*p.alarms++ // only ever touched in the object's turns
	return nil
}

func peers(t *testing.T, rt *core.Runtime, alarms *int, names ...string) []*core.Stub[*peer] {
	t.Helper()
	ns, err := core.Register(rt, "peers", func(_ context.Context, st *core.State) (*peer, error) {
		return &peer{st: st, alarms: alarms}, nil
	})
	require.NoError(t, err)
	var out []*core.Stub[*peer]
	for _, name := range names {
		s, err := ns.Get(name)
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

// callBounded runs fn on a goroutine and waits for it for a minute of
// fake time. If it hangs, unwedge (which cancels what the waits watch)
// lets it end, and the test fails.
func callBounded(t *testing.T, what string, unwedge func(), fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Errorf("%s: still waiting after a minute: deadlocked", what)
		unwedge()
		return <-done
	}
}

func TestStub_TriggerAlarmFromOwnTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		var alarms int
		a := peers(t, rt, &alarms, "A")[0]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		require.NoError(t, core.Do(ctx, a, func(ctx context.Context, p *peer) error {
			return p.st.SetAlarm(ctx, p.st.Now().Add(time.Hour))
		}))
		type result struct {
			had bool
			err error
		}
		var got result
		err := callBounded(t, "A's turn calling A's TriggerAlarm with its own ctx", cancel, func() error {
			return core.Do(ctx, a, func(ctx context.Context, p *peer) error {
				got.had, got.err = a.TriggerAlarm(ctx)
				return nil
			})
		})
		require.NoError(t, err)
		if !got.had || got.err != nil {
			t.Errorf("TriggerAlarm from the object's own turn: got (%v, %v), want (true, nil)", got.had, got.err)
		}
		n, err := core.Call(context.Background(), a, func(context.Context, *peer) (int, error) { return alarms, nil })
		require.NoError(t, err)
		if n != 1 {
			t.Errorf("alarm runs: got %d, want 1", n)
		}
	})
}

func TestCall_SelfCallOpensGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		a := peers(t, rt, new(int), "A")[0]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var got int
		err := callBounded(t, "A's turn calling A with its own ctx", cancel, func() error {
			var err error
			got, err = core.Call(ctx, a, func(ctx context.Context, _ *peer) (int, error) {
				return core.Call(ctx, a, func(context.Context, *peer) (int, error) { return 42, nil })
			})
			return err
		})
		require.NoError(t, err)
		if got != 42 {
			t.Errorf("the inner call's result: got %d, want 42", got)
		}
	})
}

// checkDeadlockErr asserts that the innermost call failed with ErrDeadlock
// as an *core.Error, and that the outer call carried it back.
func checkDeadlockErr(t *testing.T, inner, outer error) {
	t.Helper()
	var e *core.Error
	if !errors.Is(inner, core.ErrDeadlock) || !errors.As(inner, &e) {
		t.Errorf("the call that closes the cycle: got %v, want a *core.Error with core.ErrDeadlock", inner)
	}
	if !errors.Is(outer, core.ErrDeadlock) {
		t.Errorf("the outer call: got %v, want the deadlock inside", outer)
	}
}

// A's turn calls B with a ctx that is not its turn's (so A's gate stays
// closed), and B's turn calls A with its own turn's ctx.
func TestCall_DeadlockIsAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		hiddenCycle(t, rt)
	})
}

// The same cycle through a third object, every hop but the first with its
// turn's ctx: A (other ctx) -> B -> C -> A. A's gate is held by A's turn,
// which waits for B, which waits for C, which waits for A's gate.
func TestCall_DeadlockThroughChainIsAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		s := peers(t, rt, new(int), "A", "B", "C")
		a, b, c := s[0], s[1], s[2]
		other, cancel := context.WithCancel(context.Background())
		defer cancel()
		var inner error
		outer := callBounded(t, "A -> B (other ctx) -> C -> A", cancel, func() error {
			return core.Do(context.Background(), a, func(context.Context, *peer) error {
				return core.Do(other, b, func(ctx context.Context, _ *peer) error {
					return core.Do(ctx, c, func(ctx context.Context, _ *peer) error {
						inner = core.Do(ctx, a, func(context.Context, *peer) error { return nil })
						return inner
					})
				})
			})
		})
		checkDeadlockErr(t, inner, outer)
	})
}

// hiddenCycle runs A -> B -> A where B is called with a ctx that is not A's
// turn's, and checks that the inner call is refused with ErrDeadlock.
func hiddenCycle(t *testing.T, rt *core.Runtime) {
	t.Helper()
	s := peers(t, rt, new(int), "A", "B")
	a, b := s[0], s[1]
	other, cancel := context.WithCancel(context.Background()) // not A's turn's ctx
	defer cancel()
	var inner error
	outer := callBounded(t, "A -> B (other ctx) -> A (B's ctx)", cancel, func() error {
		return core.Do(context.Background(), a, func(context.Context, *peer) error {
			return core.Do(other, b, func(ctx context.Context, _ *peer) error {
				inner = core.Do(ctx, a, func(context.Context, *peer) error { return nil })
				return inner
			})
		})
	})
	checkDeadlockErr(t, inner, outer)
}
