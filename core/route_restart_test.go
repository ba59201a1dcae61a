package core_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL4, S-CL14: a node restarted under its own name, whose previous process was lost holding the objects'
// leases, does not take them over before they lapse (the old process may be paused, CL5), and a
// method call or a relayed request at it, or sent to it by another node, waits for that within its
// attempts and is served, instead of failing with ErrNotOwner naming the node itself. A closure
// (core.Call) is refused at once, saying the lease is the node's own from before its restart.
func TestMethodCallAtRestartedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		ctx := context.Background()
		names := shardsApart(c, 4)
		old := openRouted(t, c, "n1", func(o *core.Options) { o.Replication.Calls = nil })
		for i, name := range names {
			_, err := old.add(ctx, old.stub(t, name), 10+i)
			require.NoError(t, err)
		}
		// The process is lost holding the leases: cut off, never closed.
		old.view.CutLog(true)
		old.view.CutLeases(true)
		old.view.CutBeacon(true)

		n1 := openRouted(t, c, "n1")
		n2 := openRouted(t, c, "n2")
		start := time.Now()

		_, err := core.Call(ctx, n1.stub(t, names[0]), func(ctx context.Context, a *account) (int, error) { return a.balance(ctx) })
		require.ErrorIs(t, err, core.ErrNotOwner)
		require.Contains(t, err.Error(), `node "n1"'s lease from before its restart`)
		require.Equal(t, start, time.Now(), "a closure is refused at once")

		got, err := n1.add(ctx, n1.stub(t, names[1]), 1)
		require.NoError(t, err, "a method call at the restarted node")
		require.Equal(t, 12, got)
		require.GreaterOrEqual(t, time.Since(start), clusterTTL, "served only once the old lease lapsed")

		w := httptest.NewRecorder()
		n1.stub(t, names[2]).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/acct/"+names[2], nil))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, "12", w.Body.String())
		require.Equal(t, "n1", w.Header().Get("X-Node"))

		// n2 learns from n1's beats that n1 is alive and the lease n1's: it sends the call there.
		time.Sleep(clusterTTL / 2)
		n2start := time.Now()
		got, err = n2.add(ctx, n2.stub(t, names[3]), 1)
		require.NoError(t, err, "a method call sent to the restarted node")
		require.Equal(t, 14, got)
		require.Equal(t, int64(2), n1.runs.Load(), "both methods ran at n1")
		require.Less(t, time.Since(n2start), 2*clusterTTL)
	})
}

// shardsApart returns k names of namespace acct, each of a shard of its own.
func shardsApart(c *replogtest.MemCluster, k int) []string {
	var names []string
	seen := map[int]bool{}
	for i := 0; len(names) < k; i++ {
		name := "r" + strconv.Itoa(i)
		if s := c.ShardOf("acct/" + name); !seen[s] {
			seen[s] = true
			names = append(names, name)
		}
	}
	return names
}
