package inventory_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/inventory"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// No goroutine outlives the runtimes the tests close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type stub = *core.Stub[*inventory.Inventory]

// reserveFunc is one of the Reserve methods, as a method expression.
type reserveFunc func(inv *inventory.Inventory, ctx context.Context, qty int) (bool, error)

func mustRegister(t testing.TB, opts inventory.Options) *core.Namespace[*inventory.Inventory] {
	t.Helper()
	rt, err := core.Open(core.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	items, err := inventory.Register(rt, "inventory", opts)
	require.NoError(t, err)
	return items
}

// mustItem returns the item called name after restocking it with stock
// units (none if stock is 0).
func mustItem(t testing.TB, items *core.Namespace[*inventory.Inventory], name string, stock int) stub {
	t.Helper()
	sku, err := items.Get(name)
	require.NoError(t, err)
	if stock > 0 {
		require.NoError(t, core.Do(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) error {
			return inv.Restock(ctx, stock)
		}))
	}
	return sku
}

func stockOf(t testing.TB, sku stub) int {
	t.Helper()
	n, err := core.Call(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) (int, error) {
		return inv.Stock(ctx)
	})
	require.NoError(t, err)
	return n
}

func reserve(sku stub, method reserveFunc, qty int) (bool, error) {
	return core.Call(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
		return method(inv, ctx, qty)
	})
}

// outcome counts what n concurrent callers saw.
type outcome struct {
	ok, refused int
	errs        []error
}

// reserveConcurrently makes n concurrent reservations of 1 unit each.
// Errors are collected, not asserted: require may not be used off the test
// goroutine.
func reserveConcurrently(sku stub, n int, method reserveFunc) outcome {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex // protects out
		out outcome
	)
	for range n {
		wg.Go(func() {
			ok, err := reserve(sku, method, 1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				out.errs = append(out.errs, err)
			case ok:
				out.ok++
			default:
				out.refused++
			}
		})
	}
	wg.Wait()
	return out
}

// S-C1: 50 concurrent reservations of 1 on a stock of 50, with no await
// between read and write: exactly 50 succeed and the stock ends at 0, on
// every one of 20 runs, and the next reservation is refused.
func TestInventory_Reserve_ConcurrentIsExact(t *testing.T) {
	items := mustRegister(t, inventory.Options{})
	for run := range 20 {
		sku := mustItem(t, items, fmt.Sprintf("sku-%d", run), 50)
		got := reserveConcurrently(sku, 50, (*inventory.Inventory).Reserve)
		require.Empty(t, got.errs, "run %d", run)
		require.Equal(t, 50, got.ok, "run %d: successes", run)
		require.Equal(t, 0, stockOf(t, sku), "run %d: stock", run)

		ok, err := reserve(sku, (*inventory.Inventory).Reserve, 1)
		require.NoError(t, err)
		require.False(t, ok, "run %d: reserved from an empty stock", run)
	}
}

// S-C2: the same load on ReserveRacy, whose await (a timer, not storage)
// opens the input gate between read and write, loses updates. The test
// measures how many: successes minus what the stock actually lost.
func TestInventory_ReserveRacy_LosesUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := mustRegister(t, inventory.Options{})
		sku := mustItem(t, items, "sku", 50)

		got := reserveConcurrently(sku, 50, (*inventory.Inventory).ReserveRacy)
		require.Empty(t, got.errs)
		decrements := 50 - stockOf(t, sku)
		lost := got.ok - decrements
		t.Logf("S-C2: %d reservations succeeded, the stock fell by %d: %d updates lost", got.ok, decrements, lost)
		require.Greater(t, lost, 0, "lost updates")
	})
}

// S-C3: ReserveVersioned, with the same await, is exact under the same
// load: with as many attempts as callers, all 50 succeed and the stock ends
// at 0. Run on the fake clock, then on the real one with real interleaving.
func TestInventory_ReserveVersioned_ConcurrentIsExact(t *testing.T) {
	check := func(t *testing.T) {
		items := mustRegister(t, inventory.Options{Attempts: 50})
		sku := mustItem(t, items, "sku", 50)
		got := reserveConcurrently(sku, 50, (*inventory.Inventory).ReserveVersioned)
		require.Empty(t, got.errs)
		require.Equal(t, 50, got.ok, "successes")
		require.Equal(t, 0, stockOf(t, sku), "stock")
	}
	t.Run("clock=fake", func(t *testing.T) { synctest.Test(t, check) })
	t.Run("clock=real", check)
}

// S-C3: with fewer attempts than callers, some give up with ErrConflict;
// they reserved nothing, so every success is subtracted exactly once.
func TestInventory_ReserveVersioned_GivesUpAfterAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := mustRegister(t, inventory.Options{Attempts: 5})
		sku := mustItem(t, items, "sku", 50)

		got := reserveConcurrently(sku, 50, (*inventory.Inventory).ReserveVersioned)
		require.NotEmpty(t, got.errs, "50 callers, 5 attempts each: some must give up")
		for _, err := range got.errs {
			require.ErrorIs(t, err, inventory.ErrConflict)
			require.ErrorContains(t, err, "inventory: stock changed during every attempt (5 attempts)")
		}
		require.Equal(t, 50, got.ok+len(got.errs), "every caller succeeded or gave up")
		require.Equal(t, 50-got.ok, stockOf(t, sku), "stock")
	})
}

// S-C3: the version sees every write, including Reserve's, which never
// awaits: mixing the two stays exact.
func TestInventory_ReserveVersioned_SeesReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := mustRegister(t, inventory.Options{Attempts: 50})
		sku := mustItem(t, items, "sku", 50)

		var wg sync.WaitGroup
		var versioned, plain outcome
		wg.Go(func() { versioned = reserveConcurrently(sku, 25, (*inventory.Inventory).ReserveVersioned) })
		wg.Go(func() { plain = reserveConcurrently(sku, 25, (*inventory.Inventory).Reserve) })
		wg.Wait()
		require.Empty(t, versioned.errs)
		require.Empty(t, plain.errs)
		require.Equal(t, 50, versioned.ok+plain.ok, "successes")
		require.Equal(t, 0, stockOf(t, sku), "stock")
	})
}

// A reservation larger than the stock is refused (false, no error) and
// changes nothing, whichever method makes it.
func TestInventory_Reserve_OutOfStock(t *testing.T) {
	items := mustRegister(t, inventory.Options{})
	sku := mustItem(t, items, "sku", 10)
	for name, method := range map[string]reserveFunc{
		"Reserve":          (*inventory.Inventory).Reserve,
		"ReserveRacy":      (*inventory.Inventory).ReserveRacy,
		"ReserveVersioned": (*inventory.Inventory).ReserveVersioned,
	} {
		ok, err := reserve(sku, method, 11)
		require.NoError(t, err, name)
		require.False(t, ok, "%s(11) on a stock of 10", name)
		require.Equal(t, 10, stockOf(t, sku), "%s changed the stock", name)
	}
}

// Quantities below 1 or above MaxStock fail with ErrInvalidQuantity, as
// does a Restock past MaxStock; nothing changes.
func TestInventory_InvalidQuantity(t *testing.T) {
	items := mustRegister(t, inventory.Options{})
	sku := mustItem(t, items, "sku", 10)
	methods := map[string]reserveFunc{
		"Reserve":          (*inventory.Inventory).Reserve,
		"ReserveRacy":      (*inventory.Inventory).ReserveRacy,
		"ReserveVersioned": (*inventory.Inventory).ReserveVersioned,
		"Restock": func(inv *inventory.Inventory, ctx context.Context, qty int) (bool, error) {
			return true, inv.Restock(ctx, qty)
		},
	}
	// Computed, not constant, so that it compiles where int has 32 bits
	// (where it wraps to a negative number, invalid all the same).
	overMax := int(uint(inventory.MaxStock) + 1)
	for _, qty := range []int{0, -1, math.MinInt, overMax, math.MaxInt} {
		for name, method := range methods {
			_, err := reserve(sku, method, qty)
			require.ErrorIs(t, err, inventory.ErrInvalidQuantity, "%s(%d)", name, qty)
			require.ErrorContains(t, err, fmt.Sprintf("inventory: invalid quantity: %d (want 1 to %d)", qty, inventory.MaxStock))
		}
	}
	require.Equal(t, 10, stockOf(t, sku), "stock after invalid calls")

	restock := func(qty int) error {
		return core.Do(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) error {
			return inv.Restock(ctx, qty)
		})
	}
	err := restock(inventory.MaxStock - 9)
	require.ErrorIs(t, err, inventory.ErrInvalidQuantity, "restock past MaxStock")
	require.ErrorContains(t, err, "would pass MaxStock")
	require.Equal(t, 10, stockOf(t, sku), "stock after a refused restock")

	require.NoError(t, restock(inventory.MaxStock-10), "restock up to MaxStock")
	require.Equal(t, inventory.MaxStock, stockOf(t, sku))
}

// The stock is durable: it survives closing and reopening the runtime.
func TestInventory_StockSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() (*core.Runtime, stub) {
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		t.Cleanup(func() { rt.Close() })
		items, err := core.Register(rt, "inventory", inventory.New)
		require.NoError(t, err)
		sku, err := items.Get("sku")
		require.NoError(t, err)
		return rt, sku
	}
	rt, sku := open()
	require.NoError(t, core.Do(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) error {
		return inv.Restock(ctx, 7)
	}))
	ok, err := reserve(sku, (*inventory.Inventory).Reserve, 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, rt.Close())

	_, sku = open()
	require.Equal(t, 5, stockOf(t, sku))
}
