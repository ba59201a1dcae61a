package room_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// lossyCalls is a node's calls whose next WebSocket message sent to another node is delivered and
// its reply lost, and that node cut off as it answers: the owner is lost after it handled the
// message and before the edge heard of it.
type lossyCalls struct {
	replog.Calls
	mu   sync.Mutex
	lose func(node string) // armed: cuts node off
}

func (c *lossyCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	reply, err := c.Calls.Send(ctx, node, req)
	c.mu.Lock()
	lose := c.lose
	if lose != nil && bytes.Contains(req, []byte(`"op":"in"`)) && bytes.Contains(req, []byte(`"frames"`)) {
		c.lose = nil
	} else {
		lose = nil
	}
	c.mu.Unlock()
	if lose == nil {
		return reply, err
	}
	lose(node)
	return nil, fmt.Errorf("lossy: request to node %q: %w", node, replog.ErrNoReply)
}

// S-CL18: the room's owner is lost after it committed a member's message and before the member's
// edge heard back. The member, at a node that was not lost, stays connected: its edge sends the
// message to the room's next owner marked as sent before, which finds it delivered and does not
// deliver it again; the member's next message follows it, at the next offset.
func TestRoom_OwnerLostBeforeItAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: a lease time")
	}
	c := replogtest.NewMemCluster().WithShards(1)
	type node struct {
		*roomNode
		calls *lossyCalls
	}
	var nodes []*node
	for _, name := range []string{"n1", "n2", "n3"} {
		view := c.Node()
		calls := &lossyCalls{Calls: view.Calls()}
		rt, rooms := openRT(t, core.Options{Logger: slog.New(slog.DiscardHandler), Replication: &core.Replication{
			Node: name, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(), Calls: calls,
			LeaseTTL: time.Second}}, room.Options{})
		srv := httptest.NewServer(room.Handler(rooms))
		t.Cleanup(srv.Close)
		nodes = append(nodes, &node{roomNode: &roomNode{name: name, view: view, rt: rt,
			url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/room/lobby"}, calls: calls})
	}
	dial := func(n *node, name string) *websocket.Conn {
		var conn *websocket.Conn
		var err error
		for range 100 { // while the room has no owner, the upgrade is refused (503)
			if conn, _, err = websocket.DefaultDialer.Dial(n.url+"?name="+name, nil); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// read returns the next delivery on conn, skipping notices.
	read := func(conn *websocket.Conn) (room.Delivery, error) {
		for {
			conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			typ, frame, err := conn.ReadMessage()
			if err != nil {
				return room.Delivery{}, err
			}
			if d, ok, err := room.ParseDelivery(frame, typ == websocket.BinaryMessage); err != nil || ok {
				return d, err
			}
		}
	}
	first := dial(nodes[0], "first") // the room runs at some node
	var owner *node
	for _, n := range nodes {
		if n.rt.Stats().Cluster.HeldLeases > 0 {
			owner = n
		}
	}
	require.NotNil(t, owner)
	first.Close()
	var edges []*node
	for _, n := range nodes {
		if n != owner {
			edges = append(edges, n)
		}
	}
	ann := dial(edges[0], "ann")
	bob := dial(edges[1], "bob")
	edges[0].calls.mu.Lock()
	edges[0].calls.lose = func(name string) {
		owner.view.CutLog(true)
		owner.view.CutLeases(true)
		owner.view.CutBeacon(true)
		owner.view.CutCalls(true)
	}
	edges[0].calls.mu.Unlock()

	require.NoError(t, ann.WriteMessage(websocket.TextMessage, []byte("one")))
	time.Sleep(100 * time.Millisecond) // "two" leaves in a call of its own, after "one"'s
	require.NoError(t, ann.WriteMessage(websocket.TextMessage, []byte("two")))
	// The room as a member joining with since=0 sees it: "one" was committed at the lost owner (its
	// broadcast may be lost with it: a member sees the skip and resumes, as Follow does), and is
	// never stored a second time.
	var replay []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		replay = nil
		carol, _, err := websocket.DefaultDialer.Dial(edges[1].url+"?name=carol&since=0", nil)
		if err != nil { // while the room has no owner, the upgrade is refused (503)
			require.True(t, time.Now().Before(deadline), "carol joins: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			carol.SetReadDeadline(time.Now().Add(5 * time.Second))
			typ, frame, err := carol.ReadMessage()
			require.NoError(t, err)
			if bytes.HasPrefix(frame, []byte("!live ")) {
				break
			}
			if d, ok, err := room.ParseDelivery(frame, typ == websocket.BinaryMessage); err == nil && ok {
				replay = append(replay, fmt.Sprintf("%d %s", d.Offset, d.Data))
			}
		}
		carol.Close()
		if len(replay) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, []string{"1 one", "2 two"}, replay, "each message once, in order")

	// ann, at a node that was not lost, stayed connected: its next message comes back to it.
	require.NoError(t, ann.WriteMessage(websocket.TextMessage, []byte("three")))
	for {
		d, err := read(ann)
		require.NoError(t, err, "ann stays connected")
		if string(d.Data) == "three" {
			require.Equal(t, int64(3), d.Offset)
			break
		}
	}
	_ = bob
}
