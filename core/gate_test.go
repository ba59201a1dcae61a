package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// The gate under contention: the turns queued behind a busy one run in
// the order their calls came, one at a time, each with its own context,
// and each call returns its own turn's outcome, whatever the turns queued
// with it do (return, panic, Goexit, Await). The tests queue calls one by
// one behind a turn that holds the gate (synctest.Wait: each caller is
// parked in the queue before the next one comes), then let it go.

// queue holds the gate of stub with a turn that waits for the returned
// func to be called, so that calls made meanwhile queue.
func queue(t *testing.T, stub *core.Stub[*counter]) (letGo func(), done <-chan error) {
	t.Helper()
	hold, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		ended <- core.Do(context.Background(), stub, func(context.Context, *counter) error {
			<-hold
			return nil
		})
	}()
	synctest.Wait()
	return func() { close(hold) }, ended
}

type orderKey struct{}

// C1: one request at a time per object, in the order the calls queued;
// the ctx a queued turn receives carries its own call's values and
// deadline, and its writes are its own.
func TestCall_QueuedTurnsRunInOrderWithTheirOwnContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		stub, err := counterNS(t, rt, new(atomic.Int64)).Get("c")
		require.NoError(t, err)
		letGo, held := queue(t, stub)

		const n = 16
		var order []int // appended only inside the object's turns
		results := make([]chan error, n)
		for i := range n {
			results[i] = make(chan error, 1)
			ctx := context.WithValue(context.Background(), orderKey{}, i)
			ctx, cancel := context.WithTimeout(ctx, time.Duration(i+1)*time.Hour)
			go func() {
				defer cancel()
				want, _ := ctx.Deadline()
				results[i] <- core.Do(ctx, stub, func(tctx context.Context, c *counter) error {
					if got := tctx.Value(orderKey{}); got != i {
						return fmt.Errorf("turn %d: ctx value %v, want its own call's %d", i, got, i)
					}
					if got, ok := tctx.Deadline(); !ok || !got.Equal(want) {
						return fmt.Errorf("turn %d: deadline %v, want its own call's %v", i, got, want)
					}
					order = append(order, i)
					return c.add(tctx, 1)
				})
			}()
			synctest.Wait() // call i is queued before call i+1 comes
		}
		letGo()
		require.NoError(t, <-held)
		for i := range n {
			require.NoError(t, <-results[i], "call %d", i)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("turns ran in the order %v, want the order their calls queued (0..%d)", order, n-1)
			}
		}
		require.Len(t, order, n)
		got, err := core.Call(context.Background(), stub, func(ctx context.Context, c *counter) ([2]int, error) { return c.memory(ctx) })
		require.NoError(t, err)
		require.Equal(t, [2]int{n, n}, got, "[in memory, stored] after %d queued turns each adding 1", n)
	})
}

// A panic in a queued turn (a deliberate difference of this runtime: the
// turn is rolled back and the instance dropped) reaches its own caller
// only: the turns queued before it keep their writes, the ones after it
// run on an instance rebuilt from storage.
func TestCall_PanicAmongQueuedTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		var ctors atomic.Int64
		stub, err := counterNS(t, rt, &ctors).Get("c")
		require.NoError(t, err)
		letGo, held := queue(t, stub)

		before, panicked := make(chan error, 1), make(chan error, 1)
		after := make(chan [2]int, 1)
		afterErr := make(chan error, 1)
		go func() {
			before <- core.Do(context.Background(), stub, func(ctx context.Context, c *counter) error { return c.add(ctx, 1) })
		}()
		synctest.Wait()
		go func() {
			panicked <- core.Do(context.Background(), stub, func(ctx context.Context, c *counter) error {
				if err := c.add(ctx, 10); err != nil {
					return err
				}
				panic("queued and half-changed")
			})
		}()
		synctest.Wait()
		go func() {
			got, err := core.Call(context.Background(), stub, func(ctx context.Context, c *counter) ([2]int, error) { return c.memory(ctx) })
			after <- got
			afterErr <- err
		}()
		synctest.Wait()
		letGo()
		require.NoError(t, <-held)
		require.NoError(t, <-before, "the turn queued before the panicking one")
		var pe *core.PanicError
		if err := <-panicked; !errors.As(err, &pe) {
			t.Fatalf("the panicking queued turn: got %v, want an error with a *core.PanicError inside", err)
		}
		require.NoError(t, <-afterErr, "the turn queued after the panicking one")
		if got := <-after; got != [2]int{1, 1} {
			t.Errorf("after the panic, [in memory, stored]: got %v, want [1 1] (the turn before kept, the panicking one gone)", got)
		}
		if got := ctors.Load(); got != 2 {
			t.Errorf("constructor runs: got %d, want 2 (the panic drops the instance)", got)
		}
	})
}

// A queued turn that calls runtime.Goexit ends its caller's goroutine,
// as it would have run on it; the turns queued after it are served.
func TestCall_GoexitAmongQueuedTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		var ctors atomic.Int64
		stub, err := counterNS(t, rt, &ctors).Get("c")
		require.NoError(t, err)
		letGo, held := queue(t, stub)

		exited := make(chan bool, 1)
		go func() {
			returned := false
			defer func() { exited <- returned }()
			core.Do(context.Background(), stub, func(ctx context.Context, c *counter) error {
				if err := c.add(ctx, 10); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			})
			returned = true // not reached: Goexit ends this goroutine
		}()
		synctest.Wait()
		next := make(chan error, 1)
		go func() {
			next <- core.Do(context.Background(), stub, func(ctx context.Context, c *counter) error { return c.add(ctx, 1) })
		}()
		synctest.Wait()
		letGo()
		require.NoError(t, <-held)
		if <-exited {
			t.Error("core.Do returned although its queued turn called runtime.Goexit")
		}
		require.NoError(t, <-next, "the turn queued after the Goexit one")
		got, err := core.Call(context.Background(), stub, func(ctx context.Context, c *counter) ([2]int, error) { return c.memory(ctx) })
		require.NoError(t, err)
		if got != [2]int{1, 1} {
			t.Errorf("[in memory, stored]: got %v, want [1 1] (the Goexit turn rolled back)", got)
		}
	})
}

// C2: a queued turn that awaits opens the gate: the turn queued after it
// runs meanwhile, and the awaiting turn then finishes with its own ctx.
func TestCall_AwaitInQueuedTurnLetsTheNextIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		stub, err := counterNS(t, rt, new(atomic.Int64)).Get("c")
		require.NoError(t, err)
		letGo, held := queue(t, stub)

		var steps []string // appended inside turns, or inside the Await while B's turn signals
		bRan := make(chan struct{})
		aDone, bDone := make(chan error, 1), make(chan error, 1)
		actx := context.WithValue(context.Background(), orderKey{}, "A")
		go func() {
			aDone <- core.Do(actx, stub, func(ctx context.Context, c *counter) error {
				steps = append(steps, "A before")
				if err := c.st.Await(ctx, func(context.Context) error {
					<-bRan // B's turn runs while A awaits
					return nil
				}); err != nil {
					return err
				}
				if got := ctx.Value(orderKey{}); got != "A" {
					return fmt.Errorf("after Await, A's ctx value: %v, want A", got)
				}
				steps = append(steps, "A after")
				return c.add(ctx, 1)
			})
		}()
		synctest.Wait()
		go func() {
			bDone <- core.Do(context.Background(), stub, func(ctx context.Context, c *counter) error {
				steps = append(steps, "B")
				close(bRan)
				return c.add(ctx, 1)
			})
		}()
		synctest.Wait()
		letGo()
		require.NoError(t, <-held)
		require.NoError(t, <-bDone)
		require.NoError(t, <-aDone)
		require.Equal(t, []string{"A before", "B", "A after"}, steps)
	})
}

// A deliberate difference: a cycle of gates fails with ErrDeadlock, also
// when the call that closes it was queued among other calls. A's turn
// calls B with a ctx that is not its own (A's gate stays closed) while B
// is busy and other calls queue on B; B's turn then calls A with its ctx.
func TestCall_DeadlockAmongQueuedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		ns, err := core.Register(rt, "peers", func(_ context.Context, st *core.State) (*peer, error) {
			return &peer{st: st, alarms: new(int)}, nil
		})
		require.NoError(t, err)
		a, err := ns.Get("A")
		require.NoError(t, err)
		b, err := ns.Get("B")
		require.NoError(t, err)
		other, cancel := context.WithCancel(context.Background())
		defer cancel()

		hold, held := make(chan struct{}), make(chan error, 1)
		go func() {
			held <- core.Do(context.Background(), b, func(context.Context, *peer) error { <-hold; return nil })
		}()
		synctest.Wait()
		plain := make(chan error, 2)
		call := func() { plain <- core.Do(other, b, func(context.Context, *peer) error { return nil }) }
		go call()
		synctest.Wait()
		var inner error
		outer := make(chan error, 1)
		go func() {
			outer <- core.Do(context.Background(), a, func(context.Context, *peer) error {
				return core.Do(other, b, func(ctx context.Context, _ *peer) error {
					inner = core.Do(ctx, a, func(context.Context, *peer) error { return nil })
					return inner
				})
			})
		}()
		synctest.Wait()
		go call()
		synctest.Wait()
		close(hold)
		require.NoError(t, <-held)
		err = callBounded(t, "A -> B (other ctx, queued) -> A (B's ctx)", cancel, func() error { return <-outer })
		checkDeadlockErr(t, inner, err)
		for range 2 {
			require.NoError(t, <-plain, "a plain call queued on B")
		}
	})
}

// turnCount is an object without storage: its turns only count.
type turnCount struct{ n int }

// C1: many callers at once on one object, the contention under which turns
// are run for their callers and the callers' waiters are recycled: each
// call returns its own turn's result, and every turn ran once. (The bubble
// fails at once if a caller is never woken.)
func TestCall_ManyCallersEachGetTheirOwnResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		ns, err := core.Register(rt, "turncounts", func(context.Context, *core.State) (*turnCount, error) { return &turnCount{}, nil })
		require.NoError(t, err)
		const objects, callers, calls = 4, 64, 250
		for o := range objects {
			stub, err := ns.Get(fmt.Sprint("t", o))
			require.NoError(t, err)
			errs := make(chan error, callers)
			for g := range callers {
				go func() {
					for i := range calls {
						want := g*calls + i
						got, err := core.Call(context.Background(), stub, func(_ context.Context, tc *turnCount) (int, error) {
							tc.n++
							return want, nil
						})
						if err == nil && got != want {
							err = fmt.Errorf("object %d, caller %d, call %d: got the result %d, want its own %d", o, g, i, got, want)
						}
						if err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for range callers {
				require.NoError(t, <-errs)
			}
			n, err := core.Call(context.Background(), stub, func(_ context.Context, tc *turnCount) (int, error) { return tc.n, nil })
			require.NoError(t, err)
			require.Equal(t, callers*calls, n, "turns run on object %d for %d calls", o, callers*calls)
		}
	})
}
