package core_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// recvOrFail reads one text message within d, failing with what if none came.
func recvOrFail(t *testing.T, c *websocket.Conn, d time.Duration, what string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, b, err := c.ReadMessage()
	require.NoError(t, err, what)
	return string(b)
}

// handOverRoom opens n1 holding a room that placement puts at n2, with members at both nodes in
// turn (alice and carol at n1, bob and dave at n2); n1 hands the room over to n2 once n2 has beaten
// for 2 LeaseTTL. It returns the members in the order they joined.
func handOverRoom(t *testing.T, n1Calls func(replog.Calls) replog.Calls) (n1, n2 *chatNode, members []*websocket.Conn) {
	t.Helper()
	c := replogtest.NewMemCluster()
	n1 = openChatNodeWith(t, c, "n1", n1Calls)
	room := roomAt(c, "n2", []string{"n1", "n2"})
	// The edges look at their tables half-way between the placers' rounds: a hand-over (a placer's)
	// is not followed in the same instant.
	time.Sleep(clusterTTL / 16)
	members = append(members, n1.join(t, room, "alice")) // the room runs at n1, alone
	n2 = openChatNode(t, c, "n2")
	members = append(members, n2.join(t, room, "bob"), n1.join(t, room, "carol"), n2.join(t, room, "dave"))
	require.Equal(t, "who:alice,bob,carol,dave", roundTrip(t, members[1], "who"))
	require.Zero(t, n2.rt.Stats().Cluster.HeldLeases, "the room runs at n1 until its hand-over")
	return n1, n2, members
}

// slowAdopt answers a call that hands connections' handles to another node a quarter LeaseTTL
// late: the other node's table still names this one as the shard's holder when it lists them.
type slowAdopt struct{ replog.Calls }

func (c slowAdopt) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	reply, err := c.Calls.Send(ctx, node, req)
	if bytes.Contains(req, []byte(`"op":"adopt"`)) {
		time.Sleep(clusterTTL / 4)
	}
	return reply, err
}

// S-CL18: when a shard is handed over, the old owner hands its connections' handles to the new
// owner before the lease: a message run at the new owner as soon as it holds the room, before the
// other edges registered their connections there, still reaches every connection, and the room's
// list keeps its order; so too when the handles came while the new owner's table still named the
// old one as the holder.
func TestWebSocketRelay_HandOverMissesNoMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls func(replog.Calls) replog.Calls
	}{
		{"prompt", func(own replog.Calls) replog.Calls { return own }},
		{"slow hand-off", func(own replog.Calls) replog.Calls { return slowAdopt{own} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n1, n2, members := handOverRoom(t, tc.calls)
				bob := members[1]
				exchange := func(msg string) { // bob sends msg, every member receives it
					t.Helper()
					send(t, bob, msg)
					want := `{"name":"bob"}:` + msg
					for i, m := range members {
						require.Equal(t, want, recvOrFail(t, m, 5*time.Second, "member "+strconv.Itoa(i)+" missed message "+msg))
					}
				}
				exchange("before")
				// n2 is picked once it has beaten for 2 LeaseTTL; the edges follow within an eighth of one.
				deadline := time.Now().Add(4 * clusterTTL)
				for n2.rt.Stats().Cluster.HeldLeases == 0 {
					require.True(t, time.Now().Before(deadline), "the room was not handed over to n2")
					time.Sleep(time.Millisecond)
				}
				exchange("just after")
				require.Zero(t, n1.rt.Stats().Cluster.HeldLeases)
				time.Sleep(clusterTTL / 4) // the edges follow the room
				exchange("later")
				require.Equal(t, "who:alice,bob,carol,dave", roundTrip(t, members[0], "who"), "the list kept its order")
			})
		})
	}
}

// closeCodeWithin reads c until its close frame, within d, and returns the close code (0 if c
// ended otherwise). Unlike closeCode it may run beside the test, in a goroutine of its own.
func closeCodeWithin(c *websocket.Conn, d time.Duration) int {
	c.SetReadDeadline(time.Now().Add(d))
	for {
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		if err != nil {
			return 0
		}
	}
}

// refuseAdopt fails every call that hands a connection's handle to another node.
type refuseAdopt struct{ replog.Calls }

func (c refuseAdopt) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	if bytes.Contains(req, []byte(`"op":"adopt"`)) {
		return nil, errors.New("refused")
	}
	return c.Calls.Send(ctx, node, req)
}

// S-CL18: a hand-over whose new owner cannot be given the connections' handles closes them with
// 1012 (CloseServiceRestart), so that their clients reconnect knowingly rather than miss what the
// object sends before their edges register them there.
func TestWebSocketRelay_HandOverUnhandedCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n1, n2, members := handOverRoom(t, func(own replog.Calls) replog.Calls { return refuseAdopt{own} })
		codes := make(chan int, len(members))
		for _, c := range members {
			go func() { codes <- closeCodeWithin(c, 4*clusterTTL) }() // over a pipe, the close frame waits for its reader
		}
		for range members {
			require.Equal(t, core.CloseServiceRestart, <-codes, "a connection the new owner was not given")
		}
		time.Sleep(clusterTTL / 4) // n2 hears the lease handed back, and takes it
		require.Equal(t, int64(1), n2.rt.Stats().Cluster.HeldLeases, "the room was handed over to n2")
		require.Zero(t, n1.rt.Stats().Cluster.HeldLeases)
	})
}
