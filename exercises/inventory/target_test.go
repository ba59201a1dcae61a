//go:build exercises && !solution

package inventory_test

import (
	"time"

	"github.com/durable-go/durable/core"
	ex "github.com/durable-go/durable/exercises/inventory"
)

// The tests' target: your answer. With -tags solution they run against
// patterns/inventory instead (solution_test.go).

type Inventory = ex.Inventory

var (
	errInvalidQuantity = ex.ErrInvalidQuantity
	errConflict        = ex.ErrConflict
)

func register(rt *core.Runtime, name string, await time.Duration, attempts int) (*core.Namespace[*Inventory], error) {
	return ex.Register(rt, name, ex.Options{Await: await, Attempts: attempts})
}
