package room_test

import (
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
	"github.com/durable-go/durable/replog/replogtest"
)

// roomNode is a node of an in-memory cluster serving rooms on loopback.
type roomNode struct {
	name string
	view *replogtest.MemNode
	rt   *core.Runtime
	url  string // ws://host/room/lobby
}

func openRoomNode(t *testing.T, c *replogtest.MemCluster, name string) *roomNode {
	t.Helper()
	view := c.Node()
	rt, rooms := openRT(t, core.Options{Logger: slog.New(slog.DiscardHandler), Replication: &core.Replication{
		Node: name, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(), Calls: view.Calls(),
		LeaseTTL: time.Second}}, room.Options{History: 4096})
	srv := httptest.NewServer(room.Handler(rooms))
	t.Cleanup(srv.Close)
	return &roomNode{name: name, view: view, rt: rt, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/room/lobby"}
}

// roomWriter sends numbered messages on one connection and records the offsets the room gave its
// own messages: a message is acknowledged when its sender receives it.
type roomWriter struct {
	name   string
	conn   *websocket.Conn
	mu     sync.Mutex
	acked  map[string]int64 // message -> offset
	closed error            // why the connection ended, if it did
}

func (w *roomWriter) read() {
	for {
		typ, frame, err := w.conn.ReadMessage()
		if err != nil {
			w.mu.Lock()
			w.closed = err
			w.mu.Unlock()
			return
		}
		d, ok, err := room.ParseDelivery(frame, typ == websocket.BinaryMessage)
		if err == nil && ok && strings.Contains(string(d.From), `"name":"`+w.name+`"`) {
			w.mu.Lock()
			w.acked[string(d.Data)] = d.Offset
			w.mu.Unlock()
		}
	}
}

// S-CL18: a room with members on every node, its owner cut off again and again (each time a node
// joins in its place): the writers on surviving nodes stay connected; every message acknowledged
// to its writer reaches every follower, at the offset the writer saw; each follower sees the
// room's offsets in one order, without a gap.
func TestRoom_ClusterOwnerLost(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: several lease times per round")
	}
	c := replogtest.NewMemCluster().WithShards(1) // the room's owner is the one shard's
	var mu sync.Mutex
	followed := map[string][]room.Delivery{} // follower -> what it received
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writers []*roomWriter
	defer func() {
		cancel()
		for _, w := range writers {
			w.conn.Close()
		}
		wg.Wait()
	}()
	follow := func(n *roomNode) {
		name := "f-" + n.name
		wg.Go(func() {
			room.Follow(ctx, n.url+"?name="+name, 0, func(d room.Delivery) error {
				mu.Lock()
				followed[name] = append(followed[name], d)
				mu.Unlock()
				return nil
			})
		})
	}
	write := func(n *roomNode) *roomWriter {
		name := "w-" + n.name
		var conn *websocket.Conn
		var err error
		for range 100 { // while the room has no owner, the upgrade is refused (503): dial again
			if conn, _, err = websocket.DefaultDialer.Dial(n.url+"?name="+name, nil); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.NoError(t, err)
		w := &roomWriter{name: name, conn: conn, acked: map[string]int64{}}
		wg.Go(w.read)
		writers = append(writers, w)
		return w
	}
	live := map[*roomNode]*roomWriter{}
	for _, name := range []string{"n1", "n2", "n3"} {
		n := openRoomNode(t, c, name)
		follow(n)
		live[n] = write(n)
	}
	sendAll := func(round, count int) {
		for i := range count {
			for n, w := range live {
				w.conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf("%s-%d-%d", n.name, round, i)))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const rounds = 3
	for round := range rounds {
		sendAll(round, 20)
		var owner *roomNode
		for n := range live {
			if n.rt.Stats().Cluster.HeldLeases > 0 {
				owner = n
			}
		}
		require.NotNil(t, owner, "round %d: a live node owns the room", round)
		owner.view.CutLog(true)
		owner.view.CutLeases(true)
		owner.view.CutBeacon(true)
		owner.view.CutCalls(true)
		live[owner].conn.Close()
		delete(live, owner)
		n := openRoomNode(t, c, fmt.Sprintf("n%d", 4+round))
		follow(n)
		live[n] = write(n)
		sendAll(round, 300) // through the takeover: 3 s and more
	}
	sendAll(rounds, 20)
	time.Sleep(2 * time.Second) // the last acknowledgements reach their writers

	acked := func() int64 {
		m := int64(0)
		for _, w := range writers {
			w.mu.Lock()
			for _, off := range w.acked {
				m = max(m, off)
			}
			w.mu.Unlock()
		}
		return m
	}
	// The last messages reach the followers. A follower refused while the room had no owner dials
	// again after a pause that grows to 5 s (Follow's backoff), then catches up from its last
	// offset: wait for that, for a bound well past it.
	caughtUp := func(maxAcked int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for n := range live {
			ds := followed["f-"+n.name]
			if len(ds) == 0 || ds[len(ds)-1].Offset < maxAcked {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !caughtUp(acked()) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	maxAcked := acked()
	for n, w := range live {
		w.mu.Lock()
		require.NoError(t, w.closed, "the writer at %s, a surviving node, stayed connected", n.name)
		w.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	byOffset := map[int64]string{}
	for name, ds := range followed {
		require.NotEmpty(t, ds, name)
		for i, d := range ds {
			if i > 0 {
				require.Equal(t, ds[i-1].Offset+1, d.Offset, "%s: offsets without a gap, in one order", name)
			}
			if prev, ok := byOffset[d.Offset]; ok {
				require.Equal(t, prev, string(d.Data), "offset %d: one message for every follower", d.Offset)
			}
			byOffset[d.Offset] = string(d.Data)
		}
	}
	for n := range live {
		ds := followed["f-"+n.name]
		require.GreaterOrEqual(t, ds[len(ds)-1].Offset, maxAcked, "the follower at %s has every acknowledged message", n.name)
	}
	nAcked := 0
	for _, w := range writers {
		w.mu.Lock()
		for msg, off := range w.acked {
			require.Equal(t, msg, byOffset[off], "acknowledged %q at offset %d", msg, off)
			nAcked++
		}
		w.mu.Unlock()
	}
	t.Logf("%d messages acknowledged, offsets up to %d, %d rounds", nAcked, maxAcked, rounds)
}
