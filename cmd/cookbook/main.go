// Command cookbook demonstrates the durable runtime: it runs the
// coordinator experiment (SEMANTICS C1 and C2) on a fresh data directory
// and prints what happened.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cookbook:", err)
		os.Exit(1)
	}
}

// item is an inventory item with one row of stock.
type item struct{ st *core.State }

func newItem(st *core.State) (*item, error) {
	_, err := st.Storage().Exec(`CREATE TABLE IF NOT EXISTS item(id INTEGER PRIMARY KEY, stock INTEGER NOT NULL)`)
	return &item{st: st}, err
}

func (it *item) stock() (int, error) {
	var n int
	err := it.st.Storage().QueryRow("SELECT stock FROM item WHERE id = 1").Scan(&n)
	if errors.Is(err, core.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

func (it *item) setStock(n int) error {
	_, err := it.st.Storage().Exec("INSERT INTO item VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET stock = excluded.stock", n)
	return err
}

// reserve reads and writes with no await between them.
func (it *item) reserve(ctx context.Context, qty int, wait time.Duration) (bool, error) {
	left, err := it.stock()
	if err != nil || left < qty {
		return false, err
	}
	if wait > 0 { // a non-storage wait: the input gate opens here
		if err := it.st.Sleep(ctx, wait); err != nil {
			return false, err
		}
	}
	return true, it.setStock(left - qty)
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cookbook", flag.ContinueOnError)
	dir := fs.String("data", "", "data directory (default: a temporary one)")
	n := fs.Int("n", 50, "concurrent reserves")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rt, err := core.Open(core.Options{Dir: *dir})
	if err != nil {
		return err
	}
	defer rt.Close()
	ns, err := core.Register(rt, "inventory", newItem)
	if err != nil {
		return err
	}
	for _, wait := range []time.Duration{0, time.Millisecond} {
		stub, err := ns.Get(fmt.Sprintf("sku-wait-%v", wait))
		if err != nil {
			return err
		}
		if err := core.Do(ctx, stub, func(_ context.Context, it *item) error { return it.setStock(*n) }); err != nil {
			return err
		}
		var ok atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, *n)
		for range *n {
			wg.Go(func() {
				got, err := core.Call(ctx, stub, func(ctx context.Context, it *item) (bool, error) { return it.reserve(ctx, 1, wait) })
				if err != nil {
					errs <- err
				}
				if got {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		left, err := core.Call(ctx, stub, func(_ context.Context, it *item) (int, error) { return it.stock() })
		if err != nil {
			return err
		}
		label := "no await between read and write (C1)"
		if wait > 0 {
			label = fmt.Sprintf("a %v await between read and write (C2)", wait)
		}
		fmt.Printf("%-45s stock %d, %d reserves: %d succeeded, stock now %d, lost updates %d\n",
			label, *n, *n, ok.Load(), left, int(ok.Load())-(*n-left))
	}
	return nil
}
