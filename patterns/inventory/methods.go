package inventory

import (
	"context"

	"github.com/durable-go/durable/core"
)

// Methods are an item's operations as methods callable on any node of a cluster (core.Define):
// called at a node that does not own the item's object, each runs at the node that does; in one
// process, or at the owner, it runs in place as core.Call does. Across nodes an error keeps the
// runtime's classes (core.ErrOverloaded, ...), and one of the item's own is a *core.RemoteError
// carrying its message for which errors.Is(err, ErrInvalidQuantity) holds as it does in one process.
type Methods struct {
	Stock   func(ctx context.Context, item *core.Stub[*Inventory], _ struct{}) (int, error)
	Restock func(ctx context.Context, item *core.Stub[*Inventory], qty int) (struct{}, error)
	Reserve func(ctx context.Context, item *core.Stub[*Inventory], qty int) (bool, error)
}

// Define defines an item's methods on items, once per namespace, on every node alike.
func Define(items *core.Namespace[*Inventory]) (*Methods, error) {
	var m Methods
	var err error
	if m.Stock, err = core.Define(items, "stock", func(ctx context.Context, inv *Inventory, _ struct{}) (int, error) {
		return inv.Stock(ctx)
	}); err != nil {
		return nil, err
	}
	if m.Restock, err = core.Define(items, "restock", func(ctx context.Context, inv *Inventory, qty int) (struct{}, error) {
		return struct{}{}, inv.Restock(ctx, qty)
	}, ErrInvalidQuantity); err != nil {
		return nil, err
	}
	if m.Reserve, err = core.Define(items, "reserve", func(ctx context.Context, inv *Inventory, qty int) (bool, error) {
		return inv.Reserve(ctx, qty)
	}, ErrInvalidQuantity); err != nil {
		return nil, err
	}
	return &m, nil
}
