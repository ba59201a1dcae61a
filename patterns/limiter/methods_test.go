package limiter_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL14: a key's limit holds across the nodes of a cluster: checks made at a node that does not
// own the key run at the one that does, in one window.
func TestMethods_FromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		open := func(name string) (*core.Namespace[*limiter.Limiter], *limiter.Methods) {
			v := c.Node()
			rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
				Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls()}})
			require.NoError(t, err)
			t.Cleanup(func() { rt.Close() })
			keys, err := core.Register(rt, "ratelimit", limiter.New)
			require.NoError(t, err)
			m, err := limiter.Define(keys)
			require.NoError(t, err)
			return keys, m
		}
		keys1, m1 := open("n1")
		keys2, m2 := open("n2")
		ctx := context.Background()
		k1, err := keys1.Get("alice")
		require.NoError(t, err)
		k2, err := keys2.Get("alice")
		require.NoError(t, err)
		check := limiter.Check{Limit: 3, Window: time.Minute}
		allowed := 0
		for i := range 6 {
			m, k := m1, k1
			if i%2 == 1 {
				m, k = m2, k2
			}
			d, err := m.Allow(ctx, k, check)
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
		}
		require.Equal(t, 3, allowed, "one window for the key, whichever node is asked")
		_, err = m2.Allow(ctx, k2, limiter.Check{})
		var re *core.RemoteError
		require.True(t, errors.As(err, &re), "%v", err)
		require.ErrorIs(t, err, limiter.ErrInvalidLimit)
		_, err = m1.Allow(ctx, k1, limiter.Check{}) // one of the two crossed nodes
		require.ErrorIs(t, err, limiter.ErrInvalidLimit)
	})
}
