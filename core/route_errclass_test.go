package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// The sentinels of the shop namespace of the error class tests.
var (
	errOutOfStock = errors.New("shop: out of stock")
	errClosedShop = errors.New("shop: closed")
	errNotNamed   = errors.New("shop: a sentinel no Define names")
)

type shop struct{}

// openShop opens node name of c with the shop namespace: take fails with the sentinel its argument
// names, wrapped, and close is defined with the sentinel errClosedShop.
func openShop(t *testing.T, c *replogtest.MemCluster, name string) (*core.Namespace[*shop], func(context.Context, *core.Stub[*shop], string) (int, error)) {
	t.Helper()
	v := c.Node()
	rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls(), LeaseTTL: clusterTTL}})
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	ns, err := core.Register(rt, "shop", func(context.Context, *core.State) (*shop, error) { return &shop{}, nil })
	require.NoError(t, err)
	take, err := core.Define(ns, "take", func(_ context.Context, _ *shop, which string) (int, error) {
		switch which {
		case "out":
			return 0, fmt.Errorf("%w: sku-1 has 0 left", errOutOfStock)
		case "closed":
			return 0, fmt.Errorf("take: %w", errClosedShop)
		case "unnamed":
			return 0, errNotNamed
		}
		return 1, nil
	}, errOutOfStock)
	require.NoError(t, err)
	_, err = core.Define(ns, "close", func(context.Context, *shop, struct{}) (struct{}, error) { return struct{}{}, nil }, errClosedShop)
	require.NoError(t, err)
	return ns, take
}

// S-CL15: the sentinel errors a namespace's methods name (Define's errs) keep their identity
// across the hop: errors.Is holds on the calling node as on the node that ran the method, for a
// sentinel any method of the namespace named; the error is still a *RemoteError carrying the
// message and naming the node; a sentinel no Define named stays a message.
func TestMethodCallNamespaceErrorsAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		ns1, take1 := openShop(t, c, "n1")
		ns2, take2 := openShop(t, c, "n2")
		ctx := context.Background()
		s1, err := ns1.Get("main")
		require.NoError(t, err)
		s2, err := ns2.Get("main")
		require.NoError(t, err)
		_, err = take1(ctx, s1, "") // node 1 serves the shop first
		require.NoError(t, err)

		// Asked of both nodes, the call runs at the owner: one of them sends it across.
		for i, call := range []func() (int, error){
			func() (int, error) { return take1(ctx, s1, "out") },
			func() (int, error) { return take2(ctx, s2, "out") },
		} {
			_, err := call()
			require.ErrorIs(t, err, errOutOfStock, "node %d", i+1)
			require.NotErrorIs(t, err, errClosedShop)
			var re *core.RemoteError
			require.ErrorAs(t, err, &re)
			require.Contains(t, err.Error(), "sku-1 has 0 left")
		}
		_, err = take2(ctx, s2, "out")
		require.Contains(t, err.Error(), `(at node "n1")`, "the call crossed the hop")

		// A sentinel another method of the namespace named.
		_, err = take2(ctx, s2, "closed")
		require.ErrorIs(t, err, errClosedShop)
		require.NotErrorIs(t, err, errOutOfStock)

		// A sentinel no Define named: only its message crosses.
		_, err = take2(ctx, s2, "unnamed")
		require.NotErrorIs(t, err, errNotNamed)
		require.Contains(t, err.Error(), errNotNamed.Error())
	})
}

// S-CL15: Define refuses error classes it cannot tell apart: a nil one, and two different errors
// with one message in a namespace.
func TestDefineErrorClassesChecked(t *testing.T) {
	rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer rt.Close()
	ns, err := core.Register(rt, "shop", func(context.Context, *core.State) (*shop, error) { return &shop{}, nil })
	require.NoError(t, err)
	fn := func(context.Context, *shop, struct{}) (int, error) { return 0, nil }
	_, err = core.Define(ns, "a", fn, nil)
	require.ErrorContains(t, err, "nil error class")
	_, err = core.Define(ns, "b", fn, errOutOfStock)
	require.NoError(t, err)
	_, err = core.Define(ns, "c", fn, errOutOfStock) // the same sentinel again: fine
	require.NoError(t, err)
	_, err = core.Define(ns, "d", fn, errors.New(errOutOfStock.Error()))
	require.ErrorContains(t, err, "two error classes")
}

// S-CL14: a call's attempts span most of a lease time: an owner out of reach for half a lease time
// (a link cut, then restored) is reached by a call made when the cut began, which runs once.
func TestMethodCallRetriesSpanTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		ctx := context.Background()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n1.view.CutCalls(true)
		go func() {
			time.Sleep(clusterTTL / 2)
			n1.view.CutCalls(false)
		}()
		start := time.Now()
		got, err := n2.add(ctx, n2.stub(t, "x"), 1)
		require.NoError(t, err)
		require.Equal(t, 2, got)
		require.Equal(t, int64(2), n1.runs.Load(), "run once")
		require.Less(t, time.Since(start), clusterTTL)
	})
}
