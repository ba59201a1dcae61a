package core_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL18: an edge that is ready keeps a connection open while its object's owner is out of its
// reach for longer than four lease times (as while a lost owner's shard waits for the engine to
// elect a new leader of its group before it can be taken over), and delivers the client's message
// once the owner takes it.
func TestWebSocketRelay_ReadyEdgeWaitsForTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		bob := n2.join(t, room, "bob")
		send(t, bob, "hi")
		require.Equal(t, `{"name":"bob"}:hi`, recv(t, bob))

		n1.view.CutCalls(true) // n1 keeps its lease, out of the edge's reach
		send(t, bob, "during")
		time.Sleep(6 * clusterTTL)
		require.NoError(t, n2.rt.Stats().Cluster.Ready, "the edge is ready")
		n1.view.CutCalls(false)
		require.Equal(t, `{"name":"bob"}:during`, recv(t, bob), "the connection stayed open, and its message reached the next owner")
		require.Equal(t, "who:bob", roundTrip(t, bob, "who"))
	})
}
