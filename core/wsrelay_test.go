package core_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// chatNode is a node of a cluster serving chat rooms over net.Pipe, for synctest bubbles.
type chatNode struct {
	*chatEnv
	name string
	view *replogtest.MemNode
}

func openChatNode(t *testing.T, c *replogtest.MemCluster, name string) *chatNode {
	t.Helper()
	return openChatNodeWith(t, c, name, func(own replog.Calls) replog.Calls { return own })
}

// cut makes n look dead to the others: every link of its is cut (its clients' connections stay).
func (n *chatNode) cut() {
	n.view.CutLog(true)
	n.view.CutLeases(true)
	n.view.CutBeacon(true)
	n.view.CutCalls(true)
}

// roomAt returns the name of a chat room whose shard c's placement puts at node among nodes.
func roomAt(c *replogtest.MemCluster, node string, nodes []string) string {
	for i := 0; ; i++ {
		name := "room-" + strconv.Itoa(i)
		if replica.Place(c.ShardOf("chat/"+name), nodes) == node {
			return name
		}
	}
}

// S-CL17, S-CL18: a WebSocket upgraded at a node that does not own the object stays at that node
// (the edge) and is relayed: its messages reach the object at its owner, the object's sends reach
// it, it is listed by WebSockets with its tags and attachment beside the owner's own, the owner's
// auto-response answers it, the object's close closes it, and the client's close reaches the
// object's handler.
func TestWebSocketRelay_EdgeAndOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice")
		bob := n2.join(t, room, "bob")

		send(t, bob, "hi")
		require.Equal(t, `{"name":"bob"}:hi`, recv(t, alice))
		require.Equal(t, `{"name":"bob"}:hi`, recv(t, bob))
		require.Equal(t, "who:alice,bob", roundTrip(t, alice, "who"), "the owner lists the edge's connection")
		require.Zero(t, n2.rt.Stats().Cluster.HeldLeases, "the object ran at its owner only")

		require.Equal(t, "pong", roundTrip(t, bob, "ping"), "the owner's auto-response")

		carol := n2.join(t, room, "carol")
		require.NoError(t, carol.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "done")))
		code, _ := closeCode(t, carol) // the edge answers the Close frame
		require.Equal(t, 4001, code)
		ev := n1.event(t)
		require.Equal(t, "close", ev.kind)
		require.Equal(t, "carol", ev.name, "the attachment came with the close")
		require.Equal(t, 4001, ev.code)
		require.Equal(t, "who:alice,bob", roundTrip(t, alice, "who"))

		require.Equal(t, "att-ok", roundTrip(t, bob, "att:100"))
		send(t, bob, "bye")
		code, reason := closeCode(t, bob)
		require.Equal(t, 4000, code)
		require.Equal(t, "bye", reason)
		require.Equal(t, "who:alice", roundTrip(t, alice, "who"))

		// An accept whose turn fails is no upgrade at the edge; no handle is left.
		_, resp, err := n2.connect(t, room, "name=dave&fail=1", nil)
		require.Error(t, err)
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.Equal(t, "who:alice", roundTrip(t, alice, "who"))
	})
}

// S-CL18: the object's messages to its connections keep their order across the edge, many at once.
func TestWebSocketRelay_OneOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice")
		bob := n2.join(t, room, "bob")
		const count = 100
		go func() {
			for i := range count {
				bob.WriteMessage(websocket.TextMessage, []byte(strconv.Itoa(i)))
			}
		}()
		for i := range count {
			want := `{"name":"bob"}:` + strconv.Itoa(i)
			require.Equal(t, want, recv(t, alice))
			require.Equal(t, want, recv(t, bob))
		}
	})
}

// S-CL18: when the object's owner hands its shard over (a drain), the connections on the other
// nodes stay open: each registers with the new owner, with its tags and attachment, and the room
// goes on.
func TestWebSocketRelay_FollowsHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2", "n3"}
		n1, n2, n3 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2"), openChatNode(t, c, "n3")
		room := roomAt(c, "n1", nodes)
		alice := n1.join(t, room, "alice")
		bob := n2.join(t, room, "bob")
		carol := n3.join(t, room, "carol")
		require.Equal(t, "who:alice,bob,carol", roundTrip(t, bob, "who"))

		codes := make(chan int, 1)
		go func() { code, _ := closeCode(t, alice); codes <- code }()
		require.NoError(t, n1.rt.Close()) // hands its shards over
		require.Equal(t, core.CloseGoingAway, <-codes, "the closing node's own client")
		time.Sleep(2 * clusterTTL)

		requireMembers(t, roundTrip(t, bob, "who"), "bob", "carol")
		send(t, carol, "still here")
		require.Equal(t, `{"name":"carol"}:still here`, recv(t, bob))
		require.Equal(t, `{"name":"carol"}:still here`, recv(t, carol))
	})
}

// S-CL18: when the owner is cut off and another node takes its shard, the connections on the
// surviving nodes stay open and follow the object there.
func TestWebSocketRelay_FollowsTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2", "n3"}
		n1, n2, n3 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2"), openChatNode(t, c, "n3")
		room := roomAt(c, "n1", nodes)
		n1.join(t, room, "alice")
		bob := n2.join(t, room, "bob")
		carol := n3.join(t, room, "carol")
		require.Equal(t, "who:alice,bob,carol", roundTrip(t, bob, "who"))

		n1.cut()
		time.Sleep(3 * clusterTTL)
		send(t, carol, "after")
		require.Equal(t, `{"name":"carol"}:after`, recv(t, bob))
		require.Equal(t, `{"name":"carol"}:after`, recv(t, carol))
		requireMembers(t, roundTrip(t, bob, "who"), "bob", "carol")
	})
}

// requireMembers checks a "who" answer's names, in any order: connections that followed their
// object to a new owner are listed in the order they registered there.
func requireMembers(t *testing.T, who string, names ...string) {
	t.Helper()
	got, ok := strings.CutPrefix(who, "who:")
	require.True(t, ok, who)
	require.ElementsMatch(t, names, strings.Split(got, ","))
}

// S-CL18: a relayed message whose reply was lost is sent again with its request id, and the node
// that had it answers from its memory: the owner delivers a client's message once, and the edge
// sends the object's message to its client once.
func TestWebSocketRelay_LostReplyDeliveredOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice")
		bob := n2.join(t, room, "bob")
		require.Equal(t, "who:alice,bob", roundTrip(t, alice, "who"))

		n1.view.LoseReplies(1) // the owner's reply to the edge's "in"
		send(t, bob, "x")
		require.Equal(t, `{"name":"bob"}:x`, recv(t, alice))
		require.Equal(t, `{"name":"bob"}:x`, recv(t, bob))
		n2.view.LoseReplies(1) // the edge's reply to the owner's "out"
		send(t, alice, "y")
		require.Equal(t, `{"name":"alice"}:y`, recv(t, alice))
		require.Equal(t, `{"name":"alice"}:y`, recv(t, bob))
		send(t, bob, "z")
		require.Equal(t, `{"name":"bob"}:z`, recv(t, alice), "x once")
		require.Equal(t, `{"name":"bob"}:z`, recv(t, bob), "x and y once")
	})
}

// stallListener serves over net.Pipe; the server's write of a 101 response waits for a receive
// from stall once the client has it, so a test can act while an upgrade is half made.
type stallListener struct {
	*coretest.PipeListener
	stall chan struct{}
}

func (l stallListener) Accept() (net.Conn, error) {
	c, err := l.PipeListener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, stall: l.stall}, nil
}

type stallConn struct {
	net.Conn
	stall chan struct{}
}

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.HasPrefix(p, []byte("HTTP/1.1 101")) {
		<-c.stall
	}
	return n, err
}

// S-CL18, R8: a client that has its 101 when the runtime closes, before the connection is served,
// hears 1001 as every other, and Close returns once it has.
func TestWebSocketRelay_CloseDuringUpgrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		view := c.Node()
		rt, ns, _ := registerChat(t, core.Options{Logger: slog.New(slog.DiscardHandler),
			Replication: &core.Replication{Node: "n1", Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(),
				Calls: view.Calls(), LeaseTTL: clusterTTL}})
		pl := stallListener{PipeListener: coretest.NewPipeListener(), stall: make(chan struct{})}
		hs := &http.Server{Handler: chatMux(t, ns)}
		served := make(chan struct{})
		go func() { defer close(served); hs.Serve(pl) }()
		t.Cleanup(func() { hs.Close(); <-served })
		env := &chatEnv{rt: rt, ns: ns, base: "ws://pipe", dial: &websocket.Dialer{NetDialContext: pl.Dial}}

		alice := env.join(t, "lobby", "alice") // its connection is not served yet
		closed := make(chan error, 1)
		go func() { closed <- rt.Close() }()
		synctest.Wait()
		var early bool
		select {
		case <-closed:
			early = true
		default:
		}
		close(pl.stall)
		code, _ := closeCode(t, alice)
		require.Equal(t, core.CloseGoingAway, code)
		require.False(t, early, "Close returned before the client being upgraded heard its close")
		require.NoError(t, <-closed)
	})
}

// S-CL18, R8: Close does not wait out the relayed call of an upgrade under way (its owner
// unreachable, the edge retries): the call ends as the node closes, and the client gets no upgrade.
func TestWebSocketRelay_CloseEndsUpgradeUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		n1.join(t, room, "alice")
		n1.view.CutCalls(true) // n1 keeps its lease: n2 retries its call
		dialed := make(chan error, 1)
		go func() { _, _, err := n2.connect(t, room, "name=bob", nil); dialed <- err }()
		synctest.Wait()
		start := time.Now()
		require.NoError(t, n2.rt.Close())
		require.Less(t, time.Since(start), time.Second, "Close waited for the upgrade's retries")
		require.Error(t, <-dialed)
	})
}
