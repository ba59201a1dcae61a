package core_test

import (
	"context"
	"fmt"

	"github.com/durable-go/durable/core"
)

// Counter is an object: one per name, one turn at a time, its own database.
type Counter struct{ st *core.State }

func NewCounter(ctx context.Context, st *core.State) (*Counter, error) {
	// The schema, step by step: each step runs once in the object's life.
	err := st.Storage().Migrate(ctx, core.SQL("CREATE TABLE hits(n INTEGER NOT NULL)"))
	return &Counter{st: st}, err
}

// Add reads and writes with no await between: no other call can interleave.
func (c *Counter) Add(ctx context.Context, delta int) (int, error) {
	var n int
	err := c.st.Storage().QueryRow(ctx, "SELECT coalesce(sum(n), 0) FROM hits").Scan(&n)
	if err != nil {
		return 0, err
	}
	_, err = c.st.Storage().Exec(ctx, "INSERT INTO hits(n) VALUES (?)", delta)
	return n + delta, err
}

func Example() {
	rt, err := core.Open(core.Options{}) // Dir "" is a private temporary directory
	if err != nil {
		panic(err)
	}
	defer rt.Close()

	counters, err := core.Register(rt, "counters", NewCounter)
	if err != nil {
		panic(err)
	}
	stub, err := counters.Get("page:/home") // same name, same object, even after a restart
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		n, err := core.Call(ctx, stub, func(ctx context.Context, c *Counter) (int, error) {
			return c.Add(ctx, 1) // runs on the object's turn; returns once durable
		})
		if err != nil {
			panic(err)
		}
		fmt.Println("hits:", n)
	}
	// Output:
	// hits: 1
	// hits: 2
	// hits: 3
}
