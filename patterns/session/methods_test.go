package session_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL14: a session written at one node is read at another: both run at its owner.
func TestMethods_FromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		open := func(name string) (*core.Namespace[*session.Session], *session.Methods) {
			v := c.Node()
			rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
				Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls()}})
			require.NoError(t, err)
			t.Cleanup(func() { rt.Close() })
			ns, err := core.Register(rt, "sessions", session.New)
			require.NoError(t, err)
			m, err := session.Define(ns)
			require.NoError(t, err)
			return ns, m
		}
		ns1, m1 := open("n1")
		ns2, m2 := open("n2")
		ctx := context.Background()
		s1, err := ns1.Get("sid")
		require.NoError(t, err)
		s2, err := ns2.Get("sid")
		require.NoError(t, err)
		_, err = m1.Set(ctx, s1, session.Entry{Key: "user", Value: []byte("alice")})
		require.NoError(t, err)
		v, err := m2.Get(ctx, s2, "user")
		require.NoError(t, err)
		require.Equal(t, "alice", string(v))
		_, err = m2.End(ctx, s2, struct{}{})
		require.NoError(t, err)
		_, err = m2.Get(ctx, s2, "user")
		var re *core.RemoteError
		require.True(t, errors.As(err, &re), "%v", err)
		require.ErrorIs(t, err, session.ErrNotFound)
		_, err = m1.Get(ctx, s1, "user") // one of the two crossed nodes
		require.ErrorIs(t, err, session.ErrNotFound)
	})
}
