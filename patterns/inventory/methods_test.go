package inventory_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/inventory"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL14, S-CL15: an item's methods work from any node of a cluster: reservations made at a node
// that does not own the item run at the one that does, and never oversell; the item's own error
// keeps its class (errors.Is) across nodes.
func TestMethods_FromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		type node struct {
			items *core.Namespace[*inventory.Inventory]
			m     *inventory.Methods
		}
		open := func(name string) node {
			v := c.Node()
			rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
				Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls()}})
			require.NoError(t, err)
			t.Cleanup(func() { rt.Close() })
			items, err := inventory.Register(rt, "inventory", inventory.Options{})
			require.NoError(t, err)
			m, err := inventory.Define(items)
			require.NoError(t, err)
			return node{items, m}
		}
		n1, n2 := open("n1"), open("n2")
		ctx := context.Background()
		sku1, err := n1.items.Get("sku-42")
		require.NoError(t, err)
		_, err = n1.m.Restock(ctx, sku1, 3)
		require.NoError(t, err)
		sku2, err := n2.items.Get("sku-42")
		require.NoError(t, err)
		reserved := 0
		for range 5 {
			ok, err := n2.m.Reserve(ctx, sku2, 1)
			require.NoError(t, err)
			if ok {
				reserved++
			}
		}
		require.Equal(t, 3, reserved)
		stock, err := n2.m.Stock(ctx, sku2, struct{}{})
		require.NoError(t, err)
		require.Zero(t, stock)
		// The item's own error, from both nodes (one sends the call across): its class holds.
		_, err = n1.m.Restock(ctx, sku1, 0)
		require.ErrorIs(t, err, inventory.ErrInvalidQuantity)
		_, err = n2.m.Restock(ctx, sku2, 0)
		var re *core.RemoteError
		require.True(t, errors.As(err, &re), "the item's own error: %v", err)
		require.ErrorIs(t, err, inventory.ErrInvalidQuantity)
		_, err = n2.m.Reserve(ctx, sku2, -1)
		require.ErrorIs(t, err, inventory.ErrInvalidQuantity)
		_, err = n1.m.Reserve(ctx, sku1, -1)
		require.ErrorIs(t, err, inventory.ErrInvalidQuantity)
	})
}
