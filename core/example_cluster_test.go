package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// Two nodes over one replicating engine (here the in-memory one of coretest; package cluster has
// NATS JetStream): an object is served by one node at a time, and the other reads what the first
// acknowledged once the first hands the object back.
func ExampleReplication() {
	engine := replogtest.NewMemCluster()
	open := func(node string) (*core.Runtime, *core.Namespace[*core.State]) {
		view := engine.Node()
		rt, _ := core.Open(core.Options{Logger: slog.New(slog.DiscardHandler), // Dir "": a temporary one
			Replication: &core.Replication{Node: node, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon()}})
		ns, _ := core.Register(rt, "carts", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
		return rt, ns
	}
	ctx := context.Background()
	rt1, carts1 := open("n1")
	rt2, carts2 := open("n2")
	defer rt2.Close()

	cart1, _ := carts1.Get("alice")
	core.Do(ctx, cart1, func(ctx context.Context, st *core.State) error {
		return st.Storage().Put(ctx, "apples", []byte("3"))
	})
	cart2, _ := carts2.Get("alice")
	read := func() (string, error) {
		return core.Call(ctx, cart2, func(ctx context.Context, st *core.State) (string, error) {
			v, _, err := st.Storage().Get(ctx, "apples")
			return string(v), err
		})
	}
	_, err := read()
	var notOwner *core.NotOwnerError
	if errors.As(err, &notOwner) {
		fmt.Println("n2: owned by", notOwner.Holder)
	}
	rt1.Close() // hands its leases back
	v, err := read()
	fmt.Println("n2:", v, err)
	// Output:
	// n2: owned by n1
	// n2: 3 <nil>
}
