package core_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// hello is an object that serves HTTP.
type hello struct{ st *core.State }

func (h *hello) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	fmt.Fprint(w, "hello from its owner")
	return nil
}

// advertise sets a node's advertised address.
func advertise(addr string) func(*core.Options) {
	return func(o *core.Options) { o.Replication.Advertise = addr }
}

// S-CL4, S-CL12: a refusal names the owner node and the address its beats advertise: the
// *NotOwnerError of a call, and the 421 of Stub.ServeHTTP in its headers and its body, so that a
// client knows where to send the request.
func TestClusterRefusalNamesOwnerAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", advertise("http://10.0.0.1:8787"))
		n2 := openNode(t, c, "n2", advertise("http://10.0.0.2:8787"))
		defer n2.rt.Close()
		defer n1.rt.Close()
		register := func(n *node) *core.Namespace[*hello] {
			ns, err := core.Register(n.rt, "web", func(_ context.Context, st *core.State) (*hello, error) { return &hello{st: st}, nil })
			require.NoError(t, err)
			return ns
		}
		web1, web2 := register(n1), register(n2)
		stub1, _ := web1.Get("page")
		rec := httptest.NewRecorder()
		stub1.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		time.Sleep(clusterTTL / 2) // a beat or two: n2 hears n1 hold the shard

		stub2, _ := web2.Get("page")
		rec = httptest.NewRecorder()
		stub2.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		require.Equal(t, http.StatusMisdirectedRequest, rec.Code)
		require.Equal(t, "n1", rec.Header().Get(core.OwnerHeader))
		require.Equal(t, "http://10.0.0.1:8787", rec.Header().Get(core.OwnerAddressHeader))
		require.Contains(t, rec.Body.String(), `owned by node "n1" at http://10.0.0.1:8787`)
		require.NotContains(t, rec.Body.String(), "hello from its owner")

		err := core.Do(context.Background(), stub2, func(context.Context, *hello) error { return nil })
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe)
		require.Equal(t, "n1", noe.Holder)
		require.Equal(t, "http://10.0.0.1:8787", noe.Address)
		require.ErrorContains(t, err, `owned by node "n1" at http://10.0.0.1:8787`)
	})
}

// S-CL12: Stats' Cluster.Nodes lists the members as the node's table has them, with their
// addresses and the shards they hold; a node that stopped beating stays listed, not alive and
// holding nothing, and its shards move to the survivor.
func TestClusterStatsListNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", advertise("http://10.0.0.1:8787"))
		n2 := openNode(t, c, "n2", advertise("http://10.0.0.2:8787"))
		defer n2.rt.Close()
		require.NoError(t, n1.put("counter", "k", "v"))
		shard := -1
		for s, owner := range n1.rt.Stats().Cluster.Owners {
			require.Equal(t, "n1", owner)
			shard = s
		}
		require.NotEqual(t, -1, shard, "n1 holds the counter's shard")
		time.Sleep(clusterTTL) // the members' beats, and the settling of both

		nodes := n2.rt.Stats().Cluster.Nodes
		require.Equal(t, []core.ClusterMember{
			{Name: "n1", Address: "http://10.0.0.1:8787", Alive: true, Ready: true, Shards: []int{shard}},
			{Name: "n2", Address: "http://10.0.0.2:8787", Alive: true, Ready: true},
		}, nodes)

		n1.view.CutBeacon(true) // n1 falls silent, as if killed
		n1.view.CutLeases(true)
		time.Sleep(3 * clusterTTL)
		nodes = n2.rt.Stats().Cluster.Nodes
		require.Equal(t, []core.ClusterMember{
			{Name: "n1", Address: "http://10.0.0.1:8787"},
			{Name: "n2", Address: "http://10.0.0.2:8787", Alive: true, Ready: true, Shards: []int{shard}},
		}, nodes, "n2 took the silent node's shard over")
		require.Equal(t, "n2", n2.rt.Stats().Cluster.Owners[shard])
		n1.rt.Close()
	})
}
