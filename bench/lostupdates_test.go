package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// item is an inventory object: one row of stock.
type item struct{ st *core.State }

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

// reserve takes qty from the stock if there is enough. With await set it
// sleeps with the input gate open between its read and its write, as a
// turn that awaits a fetch would: other reserves read the same stock
// meanwhile and the last write wins (SEMANTICS C2).
func (it *item) reserve(ctx context.Context, qty int, await bool) (bool, error) {
	left, err := it.stock(ctx)
	if err != nil || left < qty {
		return false, err
	}
	if await {
		if err := it.st.Sleep(ctx, time.Millisecond); err != nil {
			return false, err
		}
	}
	return true, it.setStock(ctx, left-qty)
}

// BenchmarkLostUpdates counts the updates lost by 50 concurrent reserve(1)
// calls on a stock of 50: lost-updates is successes minus the stock's
// actual decrease, per round. With await=sleep the turns interleave at the
// sleep and most updates are lost; with await=none the input gate keeps
// each read-then-write whole and none are (the benchmark fails otherwise).
func BenchmarkLostUpdates(b *testing.B) {
	for _, await := range []bool{true, false} {
		name := "await=none"
		if await {
			name = "await=sleep"
		}
		b.Run(name, func(b *testing.B) { benchLostUpdates(b, await) })
	}
}

func benchLostUpdates(b *testing.B, await bool) {
	const stock = 50
	ctx := context.Background()
	rt := openRuntime(b, core.Options{})
	defer closeRuntime(b, rt)
	ns, err := core.Register(rt, "items", newItem)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	lost, rounds := 0, 0
	for b.Loop() {
		s, err := ns.Get("sku-" + strconv.Itoa(rounds))
		if err != nil {
			b.Fatal(err)
		}
		if err := core.Do(ctx, s, func(ctx context.Context, it *item) error { return it.setStock(ctx, stock) }); err != nil {
			b.Fatal(err)
		}
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range stock {
			wg.Go(func() {
				got, err := core.Call(ctx, s, func(ctx context.Context, it *item) (bool, error) { return it.reserve(ctx, 1, await) })
				if err != nil {
					b.Error(err)
				}
				if got {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		left, err := core.Call(ctx, s, func(ctx context.Context, it *item) (int, error) { return it.stock(ctx) })
		if err != nil {
			b.Fatal(err)
		}
		lost += int(ok.Load()) - (stock - left)
		rounds++
	}
	if !await && lost != 0 {
		b.Errorf("%d updates lost without an await between read and write, want 0", lost)
	}
	b.ReportMetric(float64(lost)/float64(rounds), "lost-updates")
}
