package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// Cart is an object with a method callable from any node.
type Cart struct{ st *core.State }

// Add puts n more apples in the cart and returns how many it holds.
func (c *Cart) Add(ctx context.Context, n int) (int, error) {
	v, _, err := c.st.Storage().Get(ctx, "apples")
	if err != nil {
		return 0, err
	}
	have, _ := strconv.Atoi(string(v))
	return have + n, c.st.Storage().Put(ctx, "apples", []byte(strconv.Itoa(have+n)))
}

// Two nodes over one engine that carries calls between them (here the in-memory one; package
// cluster's engine does it over NATS): a method called at the node that does not own the object runs
// at the one that does.
func ExampleDefine() {
	engine := replogtest.NewMemCluster()
	open := func(node string) (*core.Runtime, *core.Namespace[*Cart], func(context.Context, *core.Stub[*Cart], int) (int, error)) {
		view := engine.Node()
		rt, _ := core.Open(core.Options{Logger: slog.New(slog.DiscardHandler),
			Replication: &core.Replication{Node: node, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(),
				Calls: view.Calls()}})
		carts, _ := core.Register(rt, "carts", func(_ context.Context, st *core.State) (*Cart, error) { return &Cart{st}, nil })
		// Every node defines the same methods: the name is what crosses the wire.
		add, _ := core.Define(carts, "add", func(ctx context.Context, c *Cart, n int) (int, error) { return c.Add(ctx, n) })
		return rt, carts, add
	}
	ctx := context.Background()
	rt1, carts1, add1 := open("n1")
	defer rt1.Close()
	rt2, carts2, add2 := open("n2")
	defer rt2.Close()

	alice1, _ := carts1.Get("alice")
	n, err := add1(ctx, alice1, 3) // n1 takes the object's shard
	fmt.Println("at n1:", n, err)
	alice2, _ := carts2.Get("alice")
	n, err = add2(ctx, alice2, 2) // sent to n1, which runs it
	fmt.Println("at n2:", n, err)
	fmt.Println("n2 holds", rt2.Stats().Cluster.HeldLeases, "leases")
	// Output:
	// at n1: 3 <nil>
	// at n2: 5 <nil>
	// n2 holds 0 leases
}
