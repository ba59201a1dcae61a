package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/inventory"
)

// One object per item; every change goes through its turns.
func ExampleInventory_Reserve() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	items, err := core.Register(rt, "inventory", inventory.New)
	if err != nil {
		log.Fatal(err)
	}
	sku, err := items.Get("sku-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	err = core.Do(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) error {
		return inv.Restock(ctx, 2)
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		ok, err := core.Call(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
			return inv.Reserve(ctx, 1)
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("reserved:", ok)
	}
	// Output:
	// reserved: true
	// reserved: true
	// reserved: false
}

// Three callers reserve at once, each awaiting something that is not
// storage between its read and its write. The version number keeps the
// count exact: every caller gets its unit and the stock falls by three.
func ExampleInventory_ReserveVersioned() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	items, err := inventory.Register(rt, "inventory", inventory.Options{
		Await:    10 * time.Millisecond,
		Attempts: 3, // enough for 3 callers: each retry follows another's success
	})
	if err != nil {
		log.Fatal(err)
	}
	sku, err := items.Get("sku-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = core.Do(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) error {
		return inv.Restock(ctx, 5)
	})
	if err != nil {
		log.Fatal(err)
	}

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			ok, err := core.Call(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
				return inv.ReserveVersioned(ctx, 1)
			})
			if err != nil || !ok {
				log.Fatal(ok, err)
			}
		})
	}
	wg.Wait()

	stock, err := core.Call(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) (int, error) {
		return inv.Stock(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:", stock)
	// Output:
	// stock: 2
}

// A quantity outside 1..MaxStock is an error, not a refusal.
func ExampleInventory_Restock() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	items, err := core.Register(rt, "inventory", inventory.New)
	if err != nil {
		log.Fatal(err)
	}
	sku, err := items.Get("sku-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	for _, qty := range []int{10, 0, inventory.MaxStock} {
		err := core.Do(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) error {
			return inv.Restock(ctx, qty)
		})
		fmt.Printf("restock %d: invalid quantity: %v\n", qty, errors.Is(err, inventory.ErrInvalidQuantity))
	}
	stock, err := core.Call(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) (int, error) {
		return inv.Stock(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:", stock)
	// Output:
	// restock 10: invalid quantity: false
	// restock 0: invalid quantity: true
	// restock 2147483647: invalid quantity: true
	// stock: 10
}
