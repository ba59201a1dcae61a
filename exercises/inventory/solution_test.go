//go:build exercises && solution

package inventory_test

import (
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/inventory"
)

// The tests' target with -tags solution: the reference solution.

type Inventory = inventory.Inventory

var (
	errInvalidQuantity = inventory.ErrInvalidQuantity
	errConflict        = inventory.ErrConflict
)

func register(rt *core.Runtime, name string, await time.Duration, attempts int) (*core.Namespace[*Inventory], error) {
	return inventory.Register(rt, name, inventory.Options{Await: await, Attempts: attempts})
}
