package core_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
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
		alice := n1.join(t, room, "alice") // the room runs at n1
		bob := n2.join(t, room, "bob")
		require.Equal(t, "who:alice,bob", roundTrip(t, bob, "who"))
		alice.SetReadDeadline(time.Time{})
		go func() { // alice stays, reading
			for {
				if _, _, err := alice.ReadMessage(); err != nil {
					return
				}
			}
		}()
		quiet, talked := make(chan struct{}), make(chan struct{})
		go func() { // and asks now and then: the room stays awake at n1
			defer close(talked)
			for {
				select {
				case <-quiet:
					return
				case <-time.After(clusterTTL / 2):
				}
				if alice.WriteMessage(websocket.TextMessage, []byte("who")) != nil {
					return
				}
			}
		}()
		defer alice.Close()
		require.Equal(t, "n1", n2.rt.Stats().Cluster.Owners[c.ShardOf("chat/"+room)], "n1 owns the room")

		n1.view.CutCalls(true) // n1 keeps its lease, out of the edge's reach
		type frame struct {
			text string
			err  error
		}
		got := make(chan frame, 4)
		bob.SetReadDeadline(time.Time{})
		go func() { // the client reads all along, as a browser does
			for {
				_, b, err := bob.ReadMessage()
				got <- frame{string(b), err}
				if err != nil {
					return
				}
			}
		}()
		send(t, bob, "during")
		time.Sleep(6 * clusterTTL)
		require.NoError(t, n2.rt.Stats().Cluster.Ready, "the edge is ready")
		select {
		case f := <-got:
			t.Fatalf("while the owner was out of reach: %q, %v", f.text, f.err)
		default:
		}
		close(quiet)
		<-talked
		n1.view.CutCalls(false)
		f := <-got
		require.NoError(t, f.err, "the connection stayed open")
		require.Equal(t, `{"name":"bob"}:during`, f.text, "its message reached the owner")
		bob.Close()
		<-got
	})
}

// S-CL18: an edge cut off from the cluster (not ready) closes a connection whose owner it cannot
// reach with 1012 after four lease times, so that the client reconnects through another node.
func TestWebSocketRelay_CutOffEdgeCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openChatNode(t, c, "n1"), openChatNode(t, c, "n2")
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice") // the room runs at n1
		bob := n2.join(t, room, "bob")
		require.Equal(t, "who:alice,bob", roundTrip(t, bob, "who"))

		n2.cut()
		start := time.Now()
		bob.SetReadDeadline(start.Add(8 * clusterTTL))
		send(t, bob, "during")
		_, _, err := bob.ReadMessage()
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, websocket.CloseServiceRestart, ce.Code)
		require.Less(t, time.Since(start), 6*clusterTTL, "closed after four lease times, not the ready edge's wait")
		alice.Close()
	})
}

// hangingCalls is a node's calls whose next WebSocket message sent to another node is never
// answered: that node is cut off as it is sent (it died with the call), and the call waits for its
// context.
// isMessageCall reports whether req, a call between nodes, carries a WebSocket's messages to the
// object's owner.
func isMessageCall(req []byte) bool {
	return bytes.Contains(req, []byte(`"op":"in"`)) && bytes.Contains(req, []byte(`"frames"`))
}

// openChatNodeWith is openChatNode with calls, the node's calls to the others, in place of its own.
func openChatNodeWith(t *testing.T, c *replogtest.MemCluster, name string, calls func(replog.Calls) replog.Calls) *chatNode {
	t.Helper()
	view := c.Node()
	return &chatNode{chatEnv: openChatPipe(t, core.Options{Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(),
			Calls: calls(view.Calls()), LeaseTTL: clusterTTL}}), name: name, view: view}
}

type hangingCalls struct {
	replog.Calls
	mu   sync.Mutex
	hang func(node string)
}

func (c *hangingCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	c.mu.Lock()
	hang := c.hang
	if hang != nil && isMessageCall(req) {
		c.hang = nil
	} else {
		hang = nil
	}
	c.mu.Unlock()
	if hang == nil {
		return c.Calls.Send(ctx, node, req)
	}
	hang(node)
	<-ctx.Done()
	return nil, fmt.Errorf("hanging: %w: %w", replog.ErrNoReply, ctx.Err())
}

// S-CL18: a message sent to an owner that dies before it answers goes to the next owner once the
// membership declares the old one dead, not after the call's whole timeout (10 s).
func TestWebSocketRelay_OwnerDiesDuringCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openChatNode(t, c, "n1")
		var calls *hangingCalls
		n2 := openChatNodeWith(t, c, "n2", func(own replog.Calls) replog.Calls { calls = &hangingCalls{Calls: own}; return calls })
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice") // the room runs at n1
		bob := n2.join(t, room, "bob")
		require.Equal(t, "who:alice,bob", roundTrip(t, bob, "who"))
		calls.mu.Lock()
		calls.hang = func(string) { n1.cut() }
		calls.mu.Unlock()

		start := time.Now()
		bob.SetReadDeadline(time.Time{})
		send(t, bob, "after")
		require.Equal(t, `{"name":"bob"}:after`, recv(t, bob), "the message reached the next owner")
		require.Less(t, time.Since(start), 2*clusterTTL, "within the takeover, not the call's timeout")
		alice.Close()
	})
}

// lostReplyCalls delivers the next WebSocket message a node sends to another, then loses its reply
// and calls lose (which cuts the other node off): the owner ran the message and is lost before the
// edge heard of it.
type lostReplyCalls struct {
	replog.Calls
	mu   sync.Mutex
	lose func()
}

func (c *lostReplyCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	reply, err := c.Calls.Send(ctx, node, req)
	c.mu.Lock()
	lose := c.lose
	if lose != nil && isMessageCall(req) {
		c.lose = nil
	} else {
		lose = nil
	}
	c.mu.Unlock()
	if lose == nil {
		return reply, err
	}
	lose()
	return nil, fmt.Errorf("lost reply: %w", replog.ErrNoReply)
}

// S-CL18: a message whose turn wrote, then awaited (committing the write) and wrote nothing after,
// is not applied again when its owner is lost before it answered: the commit at the Await recorded
// it delivered, as a turn cut by a crash after an Await is not run again in one process either.
func TestWebSocketRelay_OwnerLostAfterAnAwaitAppliesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openChatNode(t, c, "n1")
		var calls *lostReplyCalls
		n2 := openChatNodeWith(t, c, "n2", func(own replog.Calls) replog.Calls { calls = &lostReplyCalls{Calls: own}; return calls })
		room := roomAt(c, "n1", []string{"n1", "n2"})
		alice := n1.join(t, room, "alice") // the room runs at n1
		bob := n2.join(t, room, "bob")
		require.Equal(t, "who:alice,bob", roundTrip(t, bob, "who"))
		require.Equal(t, "tally:1", roundTrip(t, bob, "tally"))

		// The next "tally" runs at n1 (its write committed at the Await), and n1 is cut off before
		// its answer reaches the edge: the edge sends it again to the next owner, n2.
		calls.mu.Lock()
		calls.lose = n1.cut
		calls.mu.Unlock()
		bob.SetReadDeadline(time.Time{})
		send(t, bob, "tally")
		send(t, bob, "peek")
		for {
			_, frame, err := bob.ReadMessage()
			require.NoError(t, err)
			if got := string(frame); strings.HasPrefix(got, "peek:") {
				require.Equal(t, "peek:2", got, "the second tally counted once")
				break
			}
		}
		alice.Close()
	})
}
