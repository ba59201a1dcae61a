package counter_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/durable-go/durable/replog/replogtest"
)

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) Write(context.Context, string, []counter.Count) error { return nil }

// S-CL14: hits recorded at any node of a cluster are counted by the one object, at its owner.
func TestMethods_FromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		open := func(name string) (*core.Namespace[*counter.Counter], *counter.Methods) {
			v := c.Node()
			rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
				Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls()}})
			require.NoError(t, err)
			t.Cleanup(func() { rt.Close() })
			ns, err := core.Register(rt, "counters", counter.Options{Sink: discard{}}.New)
			require.NoError(t, err)
			m, err := counter.Define(ns)
			require.NoError(t, err)
			return ns, m
		}
		ns1, m1 := open("n1")
		ns2, m2 := open("n2")
		ctx := context.Background()
		l1, err := ns1.Get("link")
		require.NoError(t, err)
		l2, err := ns2.Get("link")
		require.NoError(t, err)
		_, err = m1.Record(ctx, l1, struct{}{})
		require.NoError(t, err)
		for range 4 {
			_, err = m2.Record(ctx, l2, struct{}{})
			require.NoError(t, err)
		}
		n, err := m2.Total(ctx, l2, struct{}{})
		require.NoError(t, err)
		require.Equal(t, int64(5), n)
	})
}
