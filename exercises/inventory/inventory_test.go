//go:build exercises

package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// item returns a stub for a fresh item in a fresh runtime.
func item(t *testing.T, opts core.Options, await time.Duration, attempts int) (*core.Runtime, *core.Stub[*Inventory]) {
	t.Helper()
	rt := coretest.Open(t, opts)
	ns, err := register(rt, "inventory", await, attempts)
	if err != nil {
		t.Fatal(err)
	}
	stub, err := ns.Get("sku-42")
	if err != nil {
		t.Fatal(err)
	}
	return rt, stub
}

func stock(t *testing.T, stub *core.Stub[*Inventory]) int {
	t.Helper()
	n, err := core.Call(t.Context(), stub, func(ctx context.Context, inv *Inventory) (int, error) { return inv.Stock(ctx) })
	if err != nil {
		t.Fatalf("Stock: %v", err)
	}
	return n
}

func restock(t *testing.T, stub *core.Stub[*Inventory], qty int) {
	t.Helper()
	if err := core.Do(t.Context(), stub, func(ctx context.Context, inv *Inventory) error { return inv.Restock(ctx, qty) }); err != nil {
		t.Fatalf("Restock(%d): %v", qty, err)
	}
}

func reserve(ctx context.Context, stub *core.Stub[*Inventory], qty int) (bool, error) {
	return core.Call(ctx, stub, func(ctx context.Context, inv *Inventory) (bool, error) { return inv.Reserve(ctx, qty) })
}

func TestStock_StartsAtZero(t *testing.T) {
	_, stub := item(t, core.Options{}, 0, 0)
	if got := stock(t, stub); got != 0 {
		t.Errorf("a new item's stock: got %d, want 0", got)
	}
}

func TestRestock_AddsUp(t *testing.T) {
	_, stub := item(t, core.Options{}, 0, 0)
	restock(t, stub, 5)
	restock(t, stub, 3)
	if got := stock(t, stub); got != 8 {
		t.Errorf("after Restock(5) and Restock(3): got %d, want 8", got)
	}
}

func TestReserve_TakesOnlyWhatIsThere(t *testing.T) {
	_, stub := item(t, core.Options{}, 0, 0)
	restock(t, stub, 3)
	for _, step := range []struct {
		qty   int
		ok    bool
		stock int
	}{
		{2, true, 1},
		{2, false, 1}, // not enough: nothing taken
		{1, true, 0},
		{1, false, 0},
	} {
		ok, err := reserve(t.Context(), stub, step.qty)
		if err != nil {
			t.Fatalf("Reserve(%d): %v", step.qty, err)
		}
		if got := stock(t, stub); ok != step.ok || got != step.stock {
			t.Errorf("Reserve(%d): got %t with stock %d, want %t with stock %d", step.qty, ok, got, step.ok, step.stock)
		}
	}
}

func TestQuantities_BelowOneAreInvalid(t *testing.T) {
	_, stub := item(t, core.Options{}, 0, 0)
	restock(t, stub, 5)
	for _, qty := range []int{0, -1} {
		if _, err := reserve(t.Context(), stub, qty); !errors.Is(err, errInvalidQuantity) {
			t.Errorf("Reserve(%d): got %v, want ErrInvalidQuantity", qty, err)
		}
		err := core.Do(t.Context(), stub, func(ctx context.Context, inv *Inventory) error { return inv.Restock(ctx, qty) })
		if !errors.Is(err, errInvalidQuantity) {
			t.Errorf("Restock(%d): got %v, want ErrInvalidQuantity", qty, err)
		}
	}
	if got := stock(t, stub); got != 5 {
		t.Errorf("invalid calls changed the stock: got %d, want 5", got)
	}
}

// SEMANTICS C1: fifty callers at once, nothing lost, nothing oversold.
func TestReserve_FiftyCallersAreExact(t *testing.T) {
	_, stub := item(t, core.Options{}, 0, 0)
	for round := range 5 {
		restock(t, stub, 50)
		var mu sync.Mutex // protects yes, errs
		yes := 0
		var errs []error
		var wg sync.WaitGroup
		for range 60 { // ten more callers than units
			wg.Go(func() {
				ok, err := reserve(t.Context(), stub, 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					yes++
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("round %d: %d of 60 reserves failed; the first: %v", round, len(errs), errs[0])
		}
		got := stock(t, stub)
		switch {
		case yes+got > 50:
			t.Fatalf("round %d: %d of 60 reserves succeeded, stock %d; want 50 and 0: a lost update (%d given + %d left = %d units from 50); "+
				"is there an await between the read of the stock and its write? Only storage calls keep the input gate shut (SEMANTICS C1-C2)", round, yes, got, yes, got, yes+got)
		case yes+got < 50:
			t.Fatalf("round %d: %d of 60 reserves succeeded, stock %d; want 50 and 0: %d units gone from the stock that no reserve got; "+
				"does a reserve that returns false, or fails, still write?", round, yes, got, 50-yes-got)
		case yes != 50:
			t.Fatalf("round %d: %d of 60 reserves succeeded, stock %d; want 50 and 0: reserves said no while the stock had units", round, yes, got)
		}
	}
}

func TestStock_SurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	for i, want := range []int{7, 14} {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := register(rt, "inventory", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		stub, _ := ns.Get("sku-42")
		restock(t, stub, 7)
		got := stock(t, stub)
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("run %d: got stock %d, want %d (the constructor must not reset it)", i+1, got, want)
		}
	}
}

// SEMANTICS C3, part 2: an await between read and write, made safe by a
// version. In a synctest bubble the awaits are exact, and every caller
// reads before any writes: without the version, updates would be lost.
func TestReserveVersioned_LosesNoUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, stub := item(t, core.Options{}, time.Millisecond, 30)
		restock(t, stub, 10)
		var mu sync.Mutex // protects yes, no, errs
		yes, no := 0, 0
		var errs []error
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				ok, err := core.Call(t.Context(), stub, func(ctx context.Context, inv *Inventory) (bool, error) {
					return inv.ReserveVersioned(ctx, 1)
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case ok:
					yes++
				default:
					no++
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d of 20 calls of ReserveVersioned failed; the first: %v", len(errs), errs[0])
		}
		if got := stock(t, stub); yes != 10 || no != 10 || got != 0 {
			hint := ""
			if yes+got > 10 {
				hint = fmt.Sprintf(": a lost update (%d given + %d left = %d units from 10); does the write happen only if the version is still the one read "+
					"(UPDATE ... WHERE version = ?, then RowsAffected), and does every write bump it? (SEMANTICS C3)", yes, got, yes+got)
			}
			t.Errorf("20 callers for 10 units: %d yes, %d no, stock %d; want 10, 10, 0%s", yes, no, got, hint)
		}
	})
}

func TestReserveVersioned_GivesUpWithErrConflict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, stub := item(t, core.Options{}, time.Millisecond, 1) // one attempt each
		restock(t, stub, 10)
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				ok, err := core.Call(t.Context(), stub, func(ctx context.Context, inv *Inventory) (bool, error) {
					return inv.ReserveVersioned(ctx, 1)
				})
				if err == nil && !ok {
					err = errors.New("false with 10 units in stock")
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		// What the two users see, whatever the design: each got its unit,
		// or was told to try again with ErrConflict (never a wrong answer),
		// at least one got through, and the stock shows every unit given.
		var conflicts, oks int
		for err := range errs {
			switch {
			case err == nil:
				oks++
			case errors.Is(err, errConflict):
				conflicts++
			default:
				t.Errorf("ReserveVersioned: %v", err)
			}
		}
		got := stock(t, stub)
		if oks+conflicts != 2 || oks < 1 || got != 10-oks {
			t.Errorf("two callers, one attempt each: %d ok, %d ErrConflict, stock %d; want 1 or 2 ok, the rest ErrConflict, stock 10 minus the oks", oks, conflicts, got)
		}
	})
}
