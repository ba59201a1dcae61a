package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// journal is an object with one table of words.
type journal struct{ st *core.State }

func newJournal(ctx context.Context, st *core.State) (*journal, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS j(word TEXT)")
	return &journal{st: st}, err
}

func (j *journal) add(ctx context.Context, word string) error {
	_, err := j.st.Storage().Exec(ctx, "INSERT INTO j(word) VALUES (?)", word)
	return err
}

func (j *journal) words(ctx context.Context) ([]string, error) {
	rows, err := j.st.Storage().Query(ctx, "SELECT word FROM j")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	sort.Strings(out)
	return out, rows.Err()
}

// wait receives from ch inside object code, failing after hangGuard
// rather than hanging the turn.
func wait(ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(hangGuard):
		return fmt.Errorf("%s: nothing within %v", what, hangGuard)
	}
}

// Storage inside an Await fn: while turn 1 is
// inside Await and turn 2 of the same object runs (and will fail),
// storage with the fn's ctx or with turn 1's outer ctx is ErrNotInTurn;
// nothing the fn tried to write is stored, and turn 2's failure reaches
// turn 2's caller only, with go test -race quiet in the second part.
func TestStorage_AwaitFnIsNotInTurn(t *testing.T) {
	rt := openRuntime(t, core.Options{})
	ns, err := core.Register(rt, "journals", newJournal)
	require.NoError(t, err)
	stub, err := ns.Get("j1")
	require.NoError(t, err)
	ctx := context.Background()

	inFn, turn2Running, fnDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var fnErrActx, fnErrOuter error
	turn1 := make(chan error, 1)
	go func() {
		turn1 <- core.Do(ctx, stub, func(ctx context.Context, j *journal) error {
			err := j.st.Await(ctx, func(actx context.Context) error {
				close(inFn)
				defer close(fnDone)
				if err := wait(turn2Running, "turn 2 running"); err != nil {
					return err
				}
				_, fnErrActx = j.st.Storage().Exec(actx, "INSERT INTO j(word) VALUES ('fn with its own ctx')")
				_, fnErrOuter = j.st.Storage().Exec(ctx, "INSERT INTO j(word) VALUES ('fn with the outer ctx')")
				return nil
			})
			if err != nil {
				return err
			}
			return j.add(ctx, "turn 1 after Await")
		})
	}()
	_, ok := recvWithin(t, inFn, hangGuard, "turn 1 inside Await")
	require.True(t, ok)
	errTurn2 := errors.New("turn 2 fails on purpose")
	turn2Err := core.Do(ctx, stub, func(ctx context.Context, j *journal) error {
		if err := j.add(ctx, "turn 2"); err != nil {
			return err
		}
		close(turn2Running)
		if err := wait(fnDone, "turn 1's fn done"); err != nil {
			return err
		}
		return errTurn2
	})
	turn1Err, ok := recvWithin(t, turn1, hangGuard, "turn 1's call")
	require.True(t, ok)

	if !errors.Is(fnErrActx, core.ErrNotInTurn) {
		t.Errorf("Exec in the Await fn with the fn's ctx: got %v, want core.ErrNotInTurn", fnErrActx)
	}
	if !errors.Is(fnErrOuter, core.ErrNotInTurn) {
		t.Errorf("Exec in the Await fn with the outer turn's ctx: got %v, want core.ErrNotInTurn", fnErrOuter)
	}
	if !errors.Is(turn2Err, errTurn2) {
		t.Errorf("turn 2's caller: got %v, want turn 2's error", turn2Err)
	}
	if turn1Err != nil {
		t.Errorf("turn 1's caller: got %v, want nil (turn 2's failure is not turn 1's)", turn1Err)
	}
	got, err := core.Call(ctx, stub, func(ctx context.Context, j *journal) ([]string, error) { return j.words(ctx) })
	require.NoError(t, err)
	if want := []string{"turn 1 after Await"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored words: got %q, want %q", got, want)
	}

	// The same without the test's hand-offs: the fn keeps trying storage
	// while other turns of the object run and fail. Under -race, a check
	// that reads the object's current turn from the fn's goroutine is
	// reported.
	const others, rounds = 4, 20
	var wg sync.WaitGroup
	var fnErrs []error
	wg.Go(func() {
		err := core.Do(ctx, stub, func(ctx context.Context, j *journal) error {
			return j.st.Await(ctx, func(actx context.Context) error {
				for range 2 * others * rounds {
					_, err := j.st.Storage().Exec(actx, "INSERT INTO j(word) VALUES ('loop, fn ctx')")
					fnErrs = append(fnErrs, err)
					_, err = j.st.Storage().Exec(ctx, "INSERT INTO j(word) VALUES ('loop, outer ctx')")
					fnErrs = append(fnErrs, err)
					runtime.Gosched()
				}
				return nil
			})
		})
		if err != nil {
			t.Errorf("the looping turn: %v", err)
		}
	})
	for range others {
		wg.Go(func() {
			for range rounds {
				err := core.Do(ctx, stub, func(ctx context.Context, j *journal) error {
					if err := j.add(ctx, "other turn"); err != nil {
						return err
					}
					return errTurn2
				})
				if !errors.Is(err, errTurn2) {
					t.Errorf("a failing turn's caller: got %v, want its own error", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range fnErrs {
		if !errors.Is(err, core.ErrNotInTurn) {
			t.Errorf("Exec in an Await fn while other turns run: got %v, want core.ErrNotInTurn", err)
			break
		}
	}
	got, err = core.Call(ctx, stub, func(ctx context.Context, j *journal) ([]string, error) { return j.words(ctx) })
	require.NoError(t, err)
	if want := []string{"turn 1 after Await"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored words after the loop: got %q, want %q", got, want)
	}
}

// Rows left open wedges the
// runtime"): a turn that returns with its Rows open succeeds, the Rows
// are closed when the turn ends, and the object can be evicted, come back
// and the runtime close.
func TestStorage_RowsLeftOpenAreClosed(t *testing.T) {
	t.Parallel() // its hang guards overlap those of other tests
	rt, err := core.Open(core.Options{MaxOpenObjects: 1})
	require.NoError(t, err)
	closed, wedged := false, false
	t.Cleanup(func() {
		if !closed && !wedged { // a wedged runtime is abandoned: its Close would hang too
			within(hangGuard, func() { rt.Close() })
		}
	})
	var ctors atomic.Int64
	ns, err := core.Register(rt, "readers", func(ctx context.Context, st *core.State) (*journal, error) {
		ctors.Add(1)
		return newJournal(ctx, st)
	})
	require.NoError(t, err)
	ctx := context.Background()
	stub := func(name string) *core.Stub[*journal] {
		s, err := ns.Get(name)
		require.NoError(t, err)
		return s
	}
	x := stub("x")
	require.NoError(t, core.Do(ctx, x, func(ctx context.Context, j *journal) error {
		for _, w := range []string{"a", "b", "c"} {
			if err := j.add(ctx, w); err != nil {
				return err
			}
		}
		return nil
	}))

	var rows *core.Rows
	if !within(hangGuard, func() {
		rows, err = core.Call(ctx, x, func(ctx context.Context, j *journal) (*core.Rows, error) {
			rows, err := j.st.Storage().Query(ctx, "SELECT word FROM j ORDER BY word")
			if err != nil {
				return nil, err
			}
			if !rows.Next() {
				return nil, errors.New("no first row")
			}
			return rows, nil // never closed
		})
	}) {
		t.Fatalf("a turn that left its Rows open did not return within %v", hangGuard)
	}
	require.NoError(t, err, "a turn that left its Rows open")
	if rows.Next() {
		t.Errorf("Rows.Next after the turn ended: got true, want false (the runtime closes the Rows a turn left open)")
	}

	// With MaxOpenObjects 1, using y and z evicts x, then y.
	for _, name := range []string{"y", "z"} {
		if !within(hangGuard, func() {
			err = core.Do(ctx, stub(name), func(ctx context.Context, j *journal) error { return j.add(ctx, name) })
		}) {
			t.Fatalf("a call to %s did not return within %v", name, hangGuard)
		}
		require.NoError(t, err)
	}
	if got := rt.Stats().Evictions; got < 2 {
		t.Errorf("evictions after using x, y, z with MaxOpenObjects 1: got %d, want >= 2", got)
	}
	// x comes back: its database was closed on eviction.
	var words []string
	if !within(hangGuard, func() {
		words, err = core.Call(ctx, x, func(ctx context.Context, j *journal) ([]string, error) { return j.words(ctx) })
	}) {
		wedged = true
		t.Fatalf("x, evicted with Rows left open, did not come back within %v: its database close is wedged", hangGuard)
	}
	require.NoError(t, err)
	if fmt.Sprint(words) != "[a b c]" {
		t.Errorf("x's words: got %q, want [a b c]", words)
	}
	var cerr error
	if !within(hangGuard, func() { cerr = rt.Close() }) {
		t.Fatalf("Runtime.Close did not return within %v after a turn left its Rows open", hangGuard)
	}
	closed = true
	if cerr != nil {
		t.Errorf("Runtime.Close: %v", cerr)
	}
}

// counter keeps its count in memory, loaded from storage by its
// constructor.
type counter struct {
	st *core.State
	n  int
}

func counterNS(t *testing.T, rt *core.Runtime, ctors *atomic.Int64) *core.Namespace[*counter] {
	t.Helper()
	ns, err := core.Register(rt, "counters", func(ctx context.Context, st *core.State) (*counter, error) {
		ctors.Add(1)
		s := st.Storage()
		if _, err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS c(id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT OR IGNORE INTO c VALUES (1, 0)"); err != nil {
			return nil, err
		}
		c := &counter{st: st}
		return c, s.QueryRow(ctx, "SELECT n FROM c").Scan(&c.n)
	})
	require.NoError(t, err)
	return ns
}

func (c *counter) add(ctx context.Context, d int) error {
	c.n += d
	_, err := c.st.Storage().Exec(ctx, "UPDATE c SET n = ?", c.n)
	return err
}

// memory returns the in-memory count and the stored one.
func (c *counter) memory(ctx context.Context) ([2]int, error) {
	var stored int
	err := c.st.Storage().QueryRow(ctx, "SELECT n FROM c").Scan(&stored)
	return [2]int{c.n, stored}, err
}

// Failed turns: a turn that
// panics is rolled back in storage and its instance dropped, so the next
// event finds memory rebuilt from storage by the constructor.
func TestCall_PanicDropsInstance(t *testing.T) {
	rt := openRuntime(t, core.Options{})
	var ctors atomic.Int64
	stub, err := counterNS(t, rt, &ctors).Get("c1")
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, core.Do(ctx, stub, func(ctx context.Context, c *counter) error { return c.add(ctx, 5) }))

	err = core.Do(ctx, stub, func(ctx context.Context, c *counter) error {
		if err := c.add(ctx, 1); err != nil {
			return err
		}
		panic("half-changed")
	})
	var pe *core.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("a panicking turn: got %v, want an error with a *core.PanicError inside", err)
	}
	got, err := core.Call(ctx, stub, func(ctx context.Context, c *counter) ([2]int, error) { return c.memory(ctx) })
	require.NoError(t, err)
	if got != [2]int{5, 5} {
		t.Errorf("after the panic, [in memory, stored]: got %v, want [5 5] (the panicking turn's change gone from both)", got)
	}
	if got := ctors.Load(); got != 2 {
		t.Errorf("constructor runs: got %d, want 2 (the panic drops the instance)", got)
	}
}

// A turn that calls runtime.Goexit (what t.Fatal does) is a failed turn:
// its writes are rolled back, its instance dropped, and the gate released,
// so the object serves the next call.
func TestCall_GoexitReleasesGate(t *testing.T) {
	t.Parallel() // its hang guard overlaps those of other tests
	rt := openRuntime(t, core.Options{})
	var ctors atomic.Int64
	stub, err := counterNS(t, rt, &ctors).Get("c1")
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, core.Do(ctx, stub, func(ctx context.Context, c *counter) error { return c.add(ctx, 1) }))

	exited := make(chan struct{})
	returned := false
	go func() {
		defer close(exited)
		core.Do(ctx, stub, func(ctx context.Context, c *counter) error {
			if err := c.add(ctx, 1); err != nil {
				return err
			}
			runtime.Goexit()
			return nil
		})
		returned = true // not reached: Goexit ends this goroutine
	}()
	_, ok := recvWithin(t, exited, hangGuard, "the goroutine that called runtime.Goexit")
	require.True(t, ok)
	require.False(t, returned, "core.Do returned although its turn called runtime.Goexit")

	bounded, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	got, err := core.Call(bounded, stub, func(ctx context.Context, c *counter) ([2]int, error) { return c.memory(ctx) })
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the call after a turn's runtime.Goexit still waited for the gate after %v: it was never released", hangGuard)
	}
	require.NoError(t, err)
	if got != [2]int{1, 1} {
		t.Errorf("after Goexit, [in memory, stored]: got %v, want [1 1] (the Goexit turn rolled back)", got)
	}
	if got := ctors.Load(); got != 2 {
		t.Errorf("constructor runs: got %d, want 2 (Goexit drops the instance)", got)
	}
}

// Many callers contending for one object's gate never see ErrDeadlock:
// only a wait that can never end is refused.
func TestCall_ContentionIsNoDeadlock(t *testing.T) {
	rt := openRuntime(t, core.Options{})
	ns, err := core.Register(rt, "journals", newJournal)
	require.NoError(t, err)
	j, err := ns.Get("busy")
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := range 200 {
				err := core.Do(context.Background(), j, func(ctx context.Context, j *journal) error {
					return j.add(ctx, fmt.Sprint(w, "-", i))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a contended call failed: %v", err)
	}
}
