package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// Shutdown is bounded: Shutdown
// cancels the runtime's base context, from which turns, Await fns and
// alarm runs derive, and waits for them until its ctx ends; what is left
// running then is reported by name. Close is Shutdown bounded by 30 s.
// The tests run in synctest bubbles: every bound is fake time.

// waiter blocks in its turns as the test tells it.
type waiter struct {
	st      *core.State
	inAlarm chan<- struct{}
}

// Alarm waits for its ctx to end.
func (w *waiter) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	w.inAlarm <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func registerWaiters(t *testing.T, rt *core.Runtime, inAlarm chan<- struct{}) *core.Namespace[*waiter] {
	t.Helper()
	ns, err := core.Register(rt, "waiters", func(_ context.Context, st *core.State) (*waiter, error) {
		return &waiter{st: st, inAlarm: inAlarm}, nil
	})
	require.NoError(t, err)
	return ns
}

func TestRuntime_ShutdownCancelsAwaitAndAlarms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, err := core.Open(core.Options{})
		require.NoError(t, err)
		inAlarm := make(chan struct{}, 1)
		ns := registerWaiters(t, rt, inAlarm)
		caller, err := ns.Get("caller")
		require.NoError(t, err)
		clock, err := ns.Get("clock")
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), clock, func(ctx context.Context, w *waiter) error {
			return w.st.SetAlarm(ctx, w.st.Now())
		}))
		// The call's own ctx never ends before the test does: only the
		// runtime's base context can end the Await fn.
		callCtx, endCall := context.WithCancel(context.Background())
		defer endCall()
		inAwait := make(chan struct{})
		callErr := make(chan error, 1)
		go func() {
			callErr <- core.Do(callCtx, caller, func(ctx context.Context, w *waiter) error {
				return w.st.Await(ctx, func(actx context.Context) error {
					close(inAwait)
					<-actx.Done()
					return actx.Err()
				})
			})
		}()
		_, ok := recvWithin(t, inAwait, time.Minute, "the call inside Await")
		require.True(t, ok)
		_, ok = recvWithin(t, inAlarm, time.Minute, "the alarm handler")
		require.True(t, ok)

		start := time.Now()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shutErr := make(chan error, 1)
		go func() { shutErr <- rt.Shutdown(sctx) }()
		select {
		case err := <-shutErr:
			if err != nil {
				t.Errorf("Shutdown: got %v, want nil (the Await fn and the alarm end with the base context)", err)
			}
			if d := time.Since(start); d >= 5*time.Second {
				t.Errorf("Shutdown took %v, want less than its 5 s bound", d)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Shutdown(5 s bound) did not return within 10 s: the Await fn and the alarm handler were not cancelled")
			endCall() // unblock the Await fn; the alarm ends at its 15 min timeout
			<-shutErr // so that the bubble can end
		}
		if err, ok := recvWithin(t, callErr, time.Minute, "the call inside Await"); ok && err == nil {
			t.Errorf("the call inside Await during Shutdown: got nil, want an error")
		}
		err = core.Do(context.Background(), caller, func(context.Context, *waiter) error { return nil })
		if !errors.Is(err, core.ErrClosed) {
			t.Errorf("a call after Shutdown: got %v, want core.ErrClosed", err)
		}
	})
}

// stubborn is a turn that ignores its ctx: it returns when release is
// closed, at the end of the test.
func stubborn(t *testing.T, rt *core.Runtime, release <-chan struct{}) (callErr <-chan error) {
	t.Helper()
	ns := registerWaiters(t, rt, nil)
	s, err := ns.Get("stubborn-1")
	require.NoError(t, err)
	started := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		errs <- core.Do(context.Background(), s, func(ctx context.Context, _ *waiter) error {
			close(started)
			<-release
			return nil
		})
	}()
	_, ok := recvWithin(t, started, time.Minute, "the stubborn turn")
	require.True(t, ok)
	return errs
}

// checkBounded runs stop (Shutdown or Close), which must give up on the
// stubborn turn after bound, and then lets the turn go.
func checkBounded(t *testing.T, what string, bound time.Duration, stop func(*core.Runtime) error) {
	synctest.Test(t, func(t *testing.T) {
		rt, err := core.Open(core.Options{})
		require.NoError(t, err)
		release := make(chan struct{})
		callErr := stubborn(t, rt, release)
		start := time.Now()
		stopErr := make(chan error, 1)
		go func() { stopErr <- stop(rt) }()
		select {
		case err := <-stopErr:
			d := time.Since(start)
			if d < bound || d > bound+bound/2 {
				t.Errorf("%s returned after %v, want about %v", what, d, bound)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: got %v, want an error for which errors.Is(err, context.DeadlineExceeded)", what, err)
			}
			if err == nil || !strings.Contains(err.Error(), "stubborn-1") {
				t.Errorf("%s: got %v, want an error naming the object left running, stubborn-1", what, err)
			}
			close(release)
		case <-time.After(bound + time.Minute):
			t.Errorf("%s did not return within %v with a %v bound: it waits for a turn that ignores its ctx", what, bound+time.Minute, bound)
			close(release)
			<-stopErr
		}
		recvWithin(t, callErr, time.Minute, "the stubborn call")
		// Whatever the runtime left to do once the turn ended.
		done := make(chan error, 1)
		go func() { done <- rt.Close() }()
		recvWithin(t, done, time.Minute, "Close after the stubborn turn ended")
	})
}

func TestRuntime_ShutdownIsBounded(t *testing.T) {
	checkBounded(t, "Shutdown(ctx with a 2 s timeout)", 2*time.Second, func(rt *core.Runtime) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return rt.Shutdown(ctx)
	})
}

func TestRuntime_CloseIsBounded(t *testing.T) {
	checkBounded(t, "Close", 30*time.Second, (*core.Runtime).Close)
}
