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

// item is the test's inventory object: one row of stock.
type item struct {
	st    *core.State
	memo  int // in-memory only
	built int
}

func newItem(ctx context.Context, st *core.State) (*item, error) {
	_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS item(id INTEGER PRIMARY KEY, stock INTEGER NOT NULL);
INSERT OR IGNORE INTO item VALUES (1, 0)`)
	return &item{st: st}, err
}

func (it *item) stock(ctx context.Context) (int, error) {
	var n int
	err := it.st.Storage().QueryRow(ctx, "SELECT stock FROM item WHERE id = 1").Scan(&n)
	return n, err
}

func (it *item) setStock(ctx context.Context, n int) error {
	_, err := it.st.Storage().Exec(ctx, "UPDATE item SET stock = ? WHERE id = 1", n)
	return err
}

// reserve has no await between read and write (SEMANTICS C1).
func (it *item) reserve(ctx context.Context, qty int) (bool, error) {
	left, err := it.stock(ctx)
	if err != nil || left < qty {
		return false, err
	}
	return true, it.setStock(ctx, left-qty)
}

// reserveRacy waits for something that is not storage between read and write (C2).
func (it *item) reserveRacy(ctx context.Context, qty int) (bool, error) {
	left, err := it.stock(ctx)
	if err != nil || left < qty {
		return false, err
	}
	if err := it.st.Sleep(ctx, time.Millisecond); err != nil {
		return false, err
	}
	return true, it.setStock(ctx, left-qty)
}

func openRT(t testing.TB, opts core.Options) *core.Runtime {
	t.Helper()
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	return rt
}

func register(t testing.TB, rt *core.Runtime) *core.Namespace[*item] {
	t.Helper()
	ns, err := core.Register(rt, "items", newItem)
	require.NoError(t, err)
	return ns
}

func get(t testing.TB, ns *core.Namespace[*item], name string) *core.Stub[*item] {
	t.Helper()
	s, err := ns.Get(name)
	require.NoError(t, err)
	return s
}

func setStock(t testing.TB, s *core.Stub[*item], n int) {
	t.Helper()
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error { return it.setStock(ctx, n) }))
}

func stockOf(t testing.TB, s *core.Stub[*item]) int {
	t.Helper()
	n, err := core.Call(context.Background(), s, func(ctx context.Context, it *item) (int, error) { return it.stock(ctx) })
	require.NoError(t, err)
	return n
}

// S-C1, S-W13: 50 concurrent reserves of 1 on stock 50 with no await
// between read and write: 50 successes, stock 0, every time (0 lost).
func TestReserve_NoAwaitIsExact(t *testing.T) {
	rt := openRT(t, core.Options{})
	ns := register(t, rt)
	for run := range 20 {
		s := get(t, ns, "sku-"+string(rune('a'+run)))
		setStock(t, s, 50)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range 50 {
			wg.Go(func() {
				got, err := core.Call(context.Background(), s, func(ctx context.Context, it *item) (bool, error) { return it.reserve(ctx, 1) })
				require.NoError(t, err)
				if got {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 50, ok, "run %d: successes", run)
		require.Equal(t, 0, stockOf(t, s), "run %d: stock", run)
	}
}

// S-C2, S-W13: the same with a non-storage await between read and write
// loses updates: every reserve succeeds, but the stock only drops by one.
func TestReserve_AwaitLosesUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		ns := register(t, rt)
		s := get(t, ns, "sku")
		setStock(t, s, 50)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range 50 {
			wg.Go(func() {
				got, err := core.Call(context.Background(), s, func(ctx context.Context, it *item) (bool, error) { return it.reserveRacy(ctx, 1) })
				require.NoError(t, err)
				if got {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		left := stockOf(t, s)
		require.Equal(t, 50, ok, "successes")
		require.Equal(t, 49, left, "stock: all 50 read 50 before any wrote 49")
		t.Logf("successes %d, decrements %d, lost updates %d", ok, 50-left, ok-(50-left))
	})
}

// A turn that writes and then fails leaves no trace.
func TestCall_FailedTurnRollsBack(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "a")
	setStock(t, s, 7)
	boom := errors.New("boom")
	err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		require.NoError(t, it.setStock(ctx, 1))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.True(t, errors.As(err, new(*core.RemoteError)))
	require.False(t, core.IsRetryable(err))
	require.Equal(t, 7, stockOf(t, s))
}

// A panic becomes an error for the caller; the turn is rolled back and the
// object keeps serving.
func TestCall_PanicIsRemoteError(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "a")
	setStock(t, s, 7)
	err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		require.NoError(t, it.setStock(ctx, 0))
		panic("kaput")
	})
	var pe *core.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "kaput", pe.Value)
	require.True(t, errors.As(err, new(*core.RemoteError)))
	require.Equal(t, 7, stockOf(t, s))
}

// Same name, same object, even across a restart; in-memory state goes.
func TestGet_SameNameSameObjectAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	ns := register(t, rt)
	setStock(t, get(t, ns, "x"), 3)
	require.NoError(t, core.Do(context.Background(), get(t, ns, "x"), func(_ context.Context, it *item) error { it.memo = 9; return nil }))
	memo, err := core.Call(context.Background(), get(t, ns, "x"), func(_ context.Context, it *item) (int, error) { return it.memo, nil })
	require.NoError(t, err)
	require.Equal(t, 9, memo, "a second stub reaches the same instance")
	require.NoError(t, rt.Close())

	rt2 := openRT(t, core.Options{Dir: dir})
	s := get(t, register(t, rt2), "x")
	require.Equal(t, 3, stockOf(t, s))
	memo, err = core.Call(context.Background(), s, func(_ context.Context, it *item) (int, error) { return it.memo, nil })
	require.NoError(t, err)
	require.Equal(t, 0, memo)
}

// Calls run one at a time, in arrival order.
func TestCall_FIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		s := get(t, register(t, rt), "q")
		gate := make(chan struct{})
		go core.Do(context.Background(), s, func(context.Context, *item) error { <-gate; return nil })
		synctest.Wait()
		var order []int
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				require.NoError(t, core.Do(context.Background(), s, func(context.Context, *item) error {
					order = append(order, i) // safe: turns never overlap
					return nil
				}))
			})
			synctest.Wait() // caller i is queued before caller i+1 arrives
		}
		close(gate)
		wg.Wait()
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, order)
	})
}
