package core_test

import (
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL14, S-CL18: a WebSocket upgrade at a node restarted under its own name, whose previous
// process was lost holding the room's lease, waits until that lease may be taken over (the old
// process may be paused, CL5) and joins the room there, as a method call does, instead of being
// refused with the node's own name; so does an upgrade another node relays to it.
func TestWebSocketUpgradeAtRestartedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		view := c.Node()
		old := &chatNode{chatEnv: openChatPipe(t, core.Options{Logger: slog.New(slog.DiscardHandler),
			Replication: &core.Replication{Node: "n1", Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(),
				LeaseTTL: clusterTTL}}), name: "n1", view: view}
		rooms := []string{roomAt(c, "n1", []string{"n1"}), ""}
		for i := 0; rooms[1] == ""; i++ { // a second room of another shard
			if r := roomAt(c, "n1", []string{"n1"}) + "-" + string(rune('a'+i)); c.ShardOf("chat/"+r) != c.ShardOf("chat/"+rooms[0]) {
				rooms[1] = r
			}
		}
		for _, r := range rooms {
			a := old.join(t, r, "alice")
			send(t, a, "hi")
			require.Equal(t, `{"name":"alice"}:hi`, recv(t, a))
		}
		old.cut() // the process is lost holding the leases: cut off, never closed

		n1 := openChatNode(t, c, "n1")
		n2 := openChatNode(t, c, "n2")
		start := time.Now()
		var carolErr error
		done := make(chan struct{})
		defer func() { <-done }()
		go func() { // an upgrade at n2, relayed to n1, while n1 meets its old lease
			defer close(done)
			time.Sleep(clusterTTL / 4) // n2 learns from n1's beats that n1 is alive
			carol, resp, err := n2.connect(t, rooms[1], "name=carol", nil)
			if carolErr = err; err != nil {
				carolErr = fmt.Errorf("%w (%v)", err, resp)
				return
			}
			carolErr = carol.WriteMessage(websocket.TextMessage, []byte("here"))
			if carolErr == nil {
				var got string
				got, carolErr = recvErr(carol)
				if carolErr == nil && got != `{"name":"carol"}:here` {
					carolErr = fmt.Errorf("carol got %q", got)
				}
			}
		}()
		bob, resp, err := n1.connect(t, rooms[0], "name=bob", nil)
		require.NoError(t, err, "an upgrade at the restarted node: %v", resp)
		require.GreaterOrEqual(t, time.Since(start), clusterTTL/2, "accepted only once the old lease lapsed")
		send(t, bob, "back")
		require.Equal(t, `{"name":"bob"}:back`, recv(t, bob))
		<-done
		require.NoError(t, carolErr, "an upgrade relayed to the restarted node")
	})
}

func recvErr(c *websocket.Conn) (string, error) {
	_, b, err := c.ReadMessage()
	return string(b), err
}
