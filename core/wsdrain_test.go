package core_test

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL18, S-CL12: a node that drains (Shutdown) hands its shards over to their next owners with
// its other nodes' connections' handles, as a hand-over does: a message run at the next owner as
// soon as it holds the room, before the edges registered their connections there, still reaches
// every connection there. The draining node's own clients are closed with 1001 (S-R8).
func TestWebSocketRelay_DrainMissesNoMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		time.Sleep(3 * clusterTTL) // settled: n2 is n1's successor
		alice := n1.join(t, room, "alice")
		members := []*websocket.Conn{n2.join(t, room, "bob"), n2.join(t, room, "dave")}
		require.Equal(t, "who:alice,bob,dave", roundTrip(t, members[0], "who"))
		require.Zero(t, n2.rt.Stats().Cluster.HeldLeases, "the room runs at n1")

		code := make(chan int, 1)
		go func() { code <- closeCodeWithin(alice, clusterTTL) }() // over a pipe, the close frame waits for its reader
		require.NoError(t, n1.rt.Close())
		require.Equal(t, websocket.CloseGoingAway, <-code, "the draining node's own client")
		require.Equal(t, int64(1), n2.rt.Stats().Cluster.HeldLeases, "the room was handed over to n2")

		send(t, members[0], "just after")
		for i, m := range members {
			require.Equal(t, `{"name":"bob"}:just after`, recvOrFail(t, m, 5*time.Second, "member "+strconv.Itoa(i)+" missed the first message after the drain"))
		}
		require.Equal(t, "who:bob,dave", roundTrip(t, members[1], "who"), "the list kept its order")
	})
}
