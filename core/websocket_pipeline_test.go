package core_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// ledger stores every message it receives and answers "ok:" + message;
// "hold" waits for the test before it answers.
type ledger struct {
	st   *core.State
	hold <-chan struct{}
}

func (l *ledger) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	_, err := l.st.AcceptWebSocket(ctx, w, r)
	if errors.Is(err, core.ErrBadHandshake) {
		return nil
	}
	return err
}

func (l *ledger) WebSocketMessage(ctx context.Context, ws *core.WebSocket, msg core.Message) error {
	if string(msg.Data) == "hold" {
		<-l.hold
	} else if _, err := l.st.Storage().Exec(ctx, "INSERT INTO m(text) VALUES (?)", string(msg.Data)); err != nil {
		return err
	}
	return ws.Send(ctx, core.TextMessage("ok:"+string(msg.Data)))
}

// S-R1, S-R3: the reader of a connection does not wait for a message's
// turn before it reads the next frame: while a message's turn runs, the
// messages after it queue in their order (an auto-response is answered
// meanwhile), then run one after the other and share one group commit;
// each answer leaves after that commit, in order.
func TestWebSocket_MessagesQueueWhileOneRuns(t *testing.T) {
	rt := openRuntime(t, core.Options{})
	hold := make(chan struct{})
	ns, err := core.Register(rt, "ledgers", func(ctx context.Context, st *core.State) (*ledger, error) {
		if err := st.SetWebSocketAutoResponse("ping", "pong"); err != nil {
			return nil, err
		}
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS m(text TEXT)")
		return &ledger{st: st, hold: hold}, err
	})
	require.NoError(t, err)
	stub, err := ns.Get("l")
	require.NoError(t, err)
	srv := httptest.NewServer(stub)
	t.Cleanup(srv.Close)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	// A first message's answer: the accept's commit is over.
	require.Equal(t, "ok:first", roundTrip(t, c, "first"))
	const n = 10
	send(t, c, "hold")
	for i := range n {
		send(t, c, strconv.Itoa(i))
	}
	send(t, c, "ping")
	// The reader answered ping: every message before it is read and queued
	// behind the held turn.
	require.Equal(t, "pong", recv(t, c), "the auto-response, while the first message's turn is still running")
	commits := rt.Stats().Commits
	close(hold)
	require.Equal(t, "ok:hold", recv(t, c))
	for i := range n {
		require.Equal(t, "ok:"+strconv.Itoa(i), recv(t, c), "the answers in the order of the messages")
	}
	if got := rt.Stats().Commits - commits; got != 1 {
		t.Errorf("commits for %d messages queued while one ran: got %d, want 1 (they share a group commit)", n, got)
	}
	stored, err := core.Call(context.Background(), stub, func(ctx context.Context, l *ledger) (string, error) {
		var s string
		return s, l.st.Storage().QueryRow(ctx, "SELECT group_concat(text, ',') FROM (SELECT text FROM m ORDER BY rowid)").Scan(&s)
	})
	require.NoError(t, err)
	require.Equal(t, "first,0,1,2,3,4,5,6,7,8,9", stored, "the messages stored, in order")
}
