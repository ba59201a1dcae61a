package core_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// chat is the tests' room object: it accepts WebSockets, keeps each
// member's name in the connection's attachment and broadcasts every
// message as JSON(attachment) + ":" + message (SEMANTICS R10). A few
// messages are commands: "who" lists the members, "att:N" tries an
// attachment of N bytes, "fail" sends and then fails, "bye" closes.
type chat struct {
	st *core.State
	ev chan<- wsEvent
}

type member struct {
	Name string `json:"name"`
}

// wsEvent is a close or error event the object received.
type wsEvent struct {
	kind   string // "close" or "error"
	ws     *core.WebSocket
	name   string // from the attachment, read during the handler
	code   int
	reason string
	err    error
}

func (c *chat) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	ws, err := c.st.AcceptWebSocket(ctx, w, r, "chat", "user:"+q.Get("name"))
	if errors.Is(err, core.ErrBadHandshake) {
		return nil // the error response is written
	}
	if err != nil {
		return err
	}
	if err := ws.SerializeAttachment(member{Name: q.Get("name")}); err != nil {
		return err
	}
	if q.Get("fail") != "" {
		return errors.New("refused after accepting")
	}
	return nil
}

func (c *chat) WebSocketMessage(ctx context.Context, ws *core.WebSocket, msg core.Message) error {
	text := string(msg.Data)
	switch {
	case text == "who":
		var names []string
		for _, p := range c.st.WebSockets("") {
			var m member
			if err := p.DeserializeAttachment(&m); err != nil {
				return err
			}
			names = append(names, m.Name)
		}
		return ws.Send(ctx, core.TextMessage("who:"+strings.Join(names, ",")))
	case strings.HasPrefix(text, "att:"):
		n, _ := strconv.Atoi(text[4:])
		// A JSON string of n-2 bytes and its quotes: n bytes in all.
		if err := ws.SerializeAttachment(strings.Repeat("x", n-2)); err != nil {
			return ws.Send(ctx, core.TextMessage("att-error:"+err.Error()))
		}
		return ws.Send(ctx, core.TextMessage("att-ok"))
	case text == "fail":
		ws.Send(ctx, core.TextMessage("never")) // dropped: the turn fails
		return errors.New("boom")
	case text == "bye":
		return ws.Close(ctx, 4000, "bye")
	case text == "peek":
		v, _, err := c.st.Storage().Get(ctx, "tally")
		if err != nil {
			return err
		}
		return ws.Send(ctx, core.TextMessage("peek:"+string(v)))
	case text == "tally":
		// A write, then an Await (which commits it) and no write after: the tally of "tally"s.
		v, _, err := c.st.Storage().Get(ctx, "tally")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(v))
		n++
		if err := c.st.Storage().Put(ctx, "tally", []byte(strconv.Itoa(n))); err != nil {
			return err
		}
		if err := c.st.Await(ctx, func(context.Context) error { return nil }); err != nil {
			return err
		}
		return ws.Send(ctx, core.TextMessage("tally:"+strconv.Itoa(n)))
	}
	att, err := ws.Attachment()
	if err != nil {
		return err
	}
	out := core.TextMessage(string(att) + ":" + text)
	for _, p := range c.st.WebSockets("chat") {
		p.Send(ctx, out)
	}
	return nil
}

func (c *chat) WebSocketClose(ctx context.Context, ws *core.WebSocket, code int, reason string) error {
	var m member
	ws.DeserializeAttachment(&m)
	c.report(wsEvent{kind: "close", ws: ws, name: m.Name, code: code, reason: reason})
	return nil
}

func (c *chat) WebSocketError(ctx context.Context, ws *core.WebSocket, err error) error {
	var m member
	ws.DeserializeAttachment(&m)
	c.report(wsEvent{kind: "error", ws: ws, name: m.Name, err: err})
	return nil
}

func (c *chat) report(e wsEvent) {
	select {
	case c.ev <- e:
	default: // a test that does not read events must not block the object
	}
}

type chatEnv struct {
	rt   *core.Runtime
	ns   *core.Namespace[*chat]
	ev   chan wsEvent
	base string                 // ws://host
	dial *websocket.Dialer      // for pipes in a bubble
	srv  *httptest.Server       // on loopback, outside bubbles
	pipe *coretest.PipeListener // in bubbles
	hs   *http.Server           // serving pipe
	mux  *http.ServeMux         // routes /chat/{room}
	seen map[string]struct{}    // rooms used
}

func chatMux(t testing.TB, ns *core.Namespace[*chat]) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/chat/{room}", func(w http.ResponseWriter, r *http.Request) {
		stub, err := ns.Get(r.PathValue("room"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		stub.ServeHTTP(w, r)
	})
	return mux
}

func registerChat(t testing.TB, opts core.Options) (*core.Runtime, *core.Namespace[*chat], chan wsEvent) {
	t.Helper()
	rt := openRT(t, opts)
	ev := make(chan wsEvent, 64)
	ns, err := core.Register(rt, "chat", func(_ context.Context, st *core.State) (*chat, error) {
		if err := st.SetWebSocketAutoResponse("ping", "pong"); err != nil {
			return nil, err
		}
		return &chat{st: st, ev: ev}, nil
	})
	require.NoError(t, err)
	return rt, ns, ev
}

// openChat serves chat rooms on a loopback listener.
func openChat(t testing.TB, opts core.Options) *chatEnv {
	t.Helper()
	rt, ns, ev := registerChat(t, opts)
	srv := httptest.NewServer(chatMux(t, ns))
	t.Cleanup(srv.Close)
	return &chatEnv{rt: rt, ns: ns, ev: ev, srv: srv, base: "ws" + strings.TrimPrefix(srv.URL, "http"), dial: websocket.DefaultDialer}
}

// openChatPipe serves chat rooms over net.Pipe, for synctest bubbles.
func openChatPipe(t testing.TB, opts core.Options) *chatEnv {
	t.Helper()
	rt, ns, ev := registerChat(t, opts)
	pl := coretest.NewPipeListener()
	hs := &http.Server{Handler: chatMux(t, ns)}
	served := make(chan struct{})
	go func() { defer close(served); hs.Serve(pl) }()
	t.Cleanup(func() { hs.Close(); <-served })
	return &chatEnv{rt: rt, ns: ns, ev: ev, pipe: pl, hs: hs, base: "ws://pipe", dial: &websocket.Dialer{NetDialContext: pl.Dial}}
}

func (e *chatEnv) connect(t testing.TB, room, query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, resp, err := e.dial.Dial(e.base+"/chat/"+room+"?"+query, hdr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

func (e *chatEnv) join(t testing.TB, room, name string) *websocket.Conn {
	t.Helper()
	c, _, err := e.connect(t, room, "name="+name, nil)
	require.NoError(t, err)
	return c
}

func (e *chatEnv) event(t testing.TB) wsEvent {
	t.Helper()
	select {
	case ev := <-e.ev:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return wsEvent{}
	}
}

func send(t testing.TB, c *websocket.Conn, text string) {
	t.Helper()
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(text)))
}

// recv reads one text message; the deadline only fails a stuck test.
func recv(t testing.TB, c *websocket.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, b, err := c.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, websocket.TextMessage, typ)
	return string(b)
}

func roundTrip(t testing.TB, c *websocket.Conn, text string) string {
	t.Helper()
	send(t, c, text)
	return recv(t, c)
}

// closeCode reads until the connection ends and returns the close code
// the server sent (1006 if none).
func closeCode(t testing.TB, c *websocket.Conn) (int, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		return ce.Code, ce.Text
	}
}

// S-R10, S-R2: two members of a room both receive a member's hello,
// prefixed with the sender's attachment.
func TestWebSocket_BroadcastReachesEveryMember(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "lobby", "ann")
	bob := env.join(t, "lobby", "bob")
	require.Equal(t, "who:ann,bob", roundTrip(t, ann, "who"))
	send(t, ann, "hello")
	require.Equal(t, `{"name":"ann"}:hello`, recv(t, ann))
	require.Equal(t, `{"name":"ann"}:hello`, recv(t, bob))
}

// S-R1: a room's messages are handled one at a time, in one order that
// every member sees; each client's own messages keep their order.
func TestWebSocket_OneOrderForTheRoom(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "r1", "ann")
	bob := env.join(t, "r1", "bob")
	require.Equal(t, "who:ann,bob", roundTrip(t, ann, "who"))
	const n = 50
	var wg sync.WaitGroup
	for _, c := range []*websocket.Conn{ann, bob} {
		wg.Go(func() {
			for i := range n {
				c.WriteMessage(websocket.TextMessage, []byte(strconv.Itoa(i)))
			}
		})
	}
	wg.Wait()
	seen := make([][]string, 2)
	for k, c := range []*websocket.Conn{ann, bob} {
		for range 2 * n {
			seen[k] = append(seen[k], recv(t, c))
		}
	}
	require.Equal(t, seen[0], seen[1], "both members see the same order")
	for _, who := range []string{"ann", "bob"} {
		next := 0
		for _, m := range seen[0] {
			if p := `{"name":"` + who + `"}:`; strings.HasPrefix(m, p) {
				require.Equal(t, strconv.Itoa(next), strings.TrimPrefix(m, p), "%s's messages in order", who)
				next++
			}
		}
		require.Equal(t, n, next)
	}
}

// S-R3: "ping" is answered "pong" by the runtime: no constructor, no turn.
func TestWebSocket_AutoResponseDoesNotWakeTheObject(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "r", "ann")
	require.Equal(t, "who:ann", roundTrip(t, ann, "who"))
	before := env.rt.Stats()
	for range 3 {
		require.Equal(t, "pong", roundTrip(t, ann, "ping"))
	}
	after := env.rt.Stats()
	require.Equal(t, before.Constructs, after.Constructs, "constructs")
	require.Equal(t, before.Turns, after.Turns, "turns")

	stub, err := env.ns.Get("r")
	require.NoError(t, err)
	at, err := core.Call(context.Background(), stub, func(_ context.Context, c *chat) (time.Time, error) {
		return c.st.WebSockets("user:ann")[0].AutoResponseTimestamp(), nil
	})
	require.NoError(t, err)
	require.False(t, at.IsZero(), "AutoResponseTimestamp is recorded")
	require.WithinDuration(t, time.Now(), at, time.Minute)
}

// S-R4, S-W12: an attachment of 16,384 bytes is kept; one byte more is
// refused with ErrTooLarge, whose message names both sizes, and the
// previous attachment stays.
func TestWebSocket_AttachmentLimit(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "r", "ann")
	require.Equal(t, "att-ok", roundTrip(t, ann, "att:16384"))
	got := roundTrip(t, ann, "att:16385")
	require.True(t, strings.HasPrefix(got, "att-error:core: value too large: websocket attachment of 16385 bytes (limit 16384)"), got)

	stub, err := env.ns.Get("r")
	require.NoError(t, err)
	n, err := core.Call(context.Background(), stub, func(_ context.Context, c *chat) (int, error) {
		att, err := c.st.WebSockets("")[0].Attachment()
		return len(att), err
	})
	require.NoError(t, err)
	require.Equal(t, 16384, n)
}

// S-R9, S-R4: a client's Close frame is answered by the runtime, its code
// and reason reach WebSocketClose (with the attachment still readable),
// and afterwards the connection is unlisted and its attachment gone.
func TestWebSocket_ClientCloseReachesHandler(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "r", "ann")
	bob := env.join(t, "r", "bob")
	require.Equal(t, "who:ann,bob", roundTrip(t, ann, "who"))

	require.NoError(t, bob.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4001, "gone fishing"), time.Now().Add(10*time.Second)))
	code, _ := closeCode(t, bob) // the runtime's answer
	require.Equal(t, 4001, code, "the runtime echoes the client's close code")
	bob.Close()

	ev := env.event(t)
	require.Equal(t, "close", ev.kind)
	require.Equal(t, 4001, ev.code)
	require.Equal(t, "gone fishing", ev.reason)
	require.Equal(t, "bob", ev.name, "the attachment is readable during WebSocketClose")

	require.Equal(t, "who:ann", roundTrip(t, ann, "who"))
	var m member
	require.ErrorIs(t, ev.ws.DeserializeAttachment(&m), core.ErrWebSocketClosed, "the attachment is gone")
	// New with the ctx API: a send from outside any turn is ErrNotInTurn
	// (it used to be queued at once); from a turn, the closed connection
	// refuses it.
	require.ErrorIs(t, ev.ws.Send(context.Background(), core.TextMessage("x")), core.ErrNotInTurn)
	stub, err := env.ns.Get("r")
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, _ *chat) error {
		require.ErrorIs(t, ev.ws.Send(ctx, core.TextMessage("x")), core.ErrWebSocketClosed)
		return nil
	}))

	// A connection that drops without a Close frame is reported as 1006.
	ann.Close()
	ev = env.event(t)
	require.Equal(t, core.CloseAbnormal, ev.code)
	require.Equal(t, "ann", ev.name)
}

// A close the object makes reaches the client with its code and reason,
// and is not reported back to the object.
func TestWebSocket_ObjectCloses(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "r", "ann")
	send(t, ann, "bye")
	code, reason := closeCode(t, ann)
	require.Equal(t, 4000, code)
	require.Equal(t, "bye", reason)
	ann.Close()

	stub, err := env.ns.Get("r")
	require.NoError(t, err)
	n, err := core.Call(context.Background(), stub, func(_ context.Context, c *chat) (int, error) {
		return len(c.st.WebSockets("")), nil
	})
	require.NoError(t, err)
	require.Zero(t, n)
	select {
	case ev := <-env.ev:
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

// Output gate: what a failed turn sent never leaves; the handler's
// failure closes the connection with 1011.
func TestWebSocket_FailedTurnSendsNothing(t *testing.T) {
	env := openChat(t, core.Options{Logger: quietLogger()})
	ann := env.join(t, "r", "ann")
	send(t, ann, "fail")
	ann.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, b, err := ann.ReadMessage()
	require.Error(t, err, "got %q", b)
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, core.CloseInternalError, ce.Code)
}

// A turn that accepted a WebSocket and then failed closes it with 1011;
// the connection is never listed.
func TestWebSocket_AcceptRolledBack(t *testing.T) {
	env := openChat(t, core.Options{Logger: quietLogger()})
	c, _, err := env.connect(t, "r", "name=ann&fail=1", nil)
	require.NoError(t, err, "the upgrade happens before the turn ends")
	code, _ := closeCode(t, c)
	require.Equal(t, core.CloseInternalError, code)

	bob := env.join(t, "r", "bob")
	require.Equal(t, "who:bob", roundTrip(t, bob, "who"))
}

// A client that stops reading is cut off with 1013 once its send queue is
// full, while the other members keep receiving every message.
func TestWebSocket_SlowClientIsCutOff(t *testing.T) {
	env := openChat(t, core.Options{WebSocketSendQueue: 4})
	fast := env.join(t, "r", "fast")
	slow := env.join(t, "r", "slow")
	require.Equal(t, "who:fast,slow", roundTrip(t, fast, "who"))

	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 2000, "the slow client was never cut off")
		msg := big + strconv.Itoa(i)
		require.Equal(t, `{"name":"fast"}:`+msg, roundTrip(t, fast, msg), "the fast client gets every message")
		if roundTrip(t, fast, "who") == "who:fast" {
			break // slow is no longer a member
		}
	}
	code, _ := closeCode(t, slow)
	require.Equal(t, core.CloseTryAgainLater, code)
	slow.Close()
	ev := env.event(t)
	require.Equal(t, "error", ev.kind)
	require.Equal(t, "slow", ev.name)
	require.ErrorIs(t, ev.err, core.ErrSlowClient)

	require.Equal(t, `{"name":"fast"}:still here`, roundTrip(t, fast, "still here"))
}

// S-R8: closing the runtime closes every WebSocket with 1001.
func TestWebSocket_ShutdownSends1001(t *testing.T) {
	env := openChat(t, core.Options{})
	ann := env.join(t, "a", "ann")
	bob := env.join(t, "b", "bob")
	require.Equal(t, "who:ann", roundTrip(t, ann, "who"))
	require.Equal(t, "who:bob", roundTrip(t, bob, "who"))
	closed := make(chan error, 1)
	go func() { closed <- env.rt.Close() }()
	for _, c := range []*websocket.Conn{ann, bob} {
		code, _ := closeCode(t, c)
		require.Equal(t, core.CloseGoingAway, code)
		c.Close()
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// A message over Options.WebSocketMaxMessage closes the connection with
// 1009 and is reported to WebSocketError as ErrTooLarge.
func TestWebSocket_OversizeMessage(t *testing.T) {
	env := openChat(t, core.Options{WebSocketMaxMessage: 1024})
	ann := env.join(t, "r", "ann")
	at := strings.Repeat("y", 1024)
	require.Equal(t, `{"name":"ann"}:`+at, roundTrip(t, ann, at), "1024 bytes is within the limit")
	send(t, ann, at+"y")
	code, _ := closeCode(t, ann)
	require.Equal(t, core.CloseMessageTooBig, code)
	ann.Close()
	ev := env.event(t)
	require.Equal(t, "error", ev.kind)
	require.ErrorIs(t, ev.err, core.ErrTooLarge)
}

// Origins: a page on another site cannot open a socket into a room; the
// same host and listed origins can, and so can non-browser clients.
func TestWebSocket_Origins(t *testing.T) {
	env := openChat(t, core.Options{WebSocketOrigins: []string{"https://app.example"}})
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"http://" + env.srv.Listener.Addr().String(), true},
		{"https://app.example", true},
		{"https://evil.example", false},
		{"null", false},
	} {
		hdr := http.Header{}
		if tc.origin != "" {
			hdr.Set("Origin", tc.origin)
		}
		c, resp, err := env.connect(t, "r", "name=x", hdr)
		if tc.ok {
			require.NoError(t, err, "origin %q", tc.origin)
			require.Equal(t, "who:x", roundTrip(t, c, "who"))
			c.Close()
			env.event(t) // its close
			continue
		}
		require.ErrorIs(t, err, websocket.ErrBadHandshake, "origin %q", tc.origin)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "origin %q", tc.origin)
	}
}

// S-R5, S-R3, S-R6, S-W11: an object whose only ties are WebSockets is evicted
// after its idle time while the clients stay connected; auto-responses
// still need no object; the next message re-runs the constructor and
// finds members and attachments intact. A turn inside Await keeps the
// object in memory.
func TestWebSocket_Hibernation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := openChatPipe(t, core.Options{}) // IdleTimeout: 10 s
		ann := env.join(t, "r", "ann")
		bob := env.join(t, "r", "bob")
		require.Equal(t, "who:ann,bob", roundTrip(t, ann, "who"))
		require.EqualValues(t, 1, env.rt.Stats().Constructs)

		time.Sleep(11 * time.Second)
		synctest.Wait()
		st := env.rt.Stats()
		require.Zero(t, st.Resident, "hibernated: connections do not pin the object")
		require.EqualValues(t, 1, st.Evictions)

		require.Equal(t, "pong", roundTrip(t, bob, "ping"), "S-R3 while hibernated")
		require.EqualValues(t, 1, env.rt.Stats().Constructs)
		require.Zero(t, env.rt.Stats().Resident)

		require.Equal(t, "who:ann,bob", roundTrip(t, ann, "who"), "S-R5: the member list is rebuilt from the runtime")
		require.EqualValues(t, 2, env.rt.Stats().Constructs, "the message re-created the object")
		send(t, bob, "hello")
		require.Equal(t, `{"name":"bob"}:hello`, recv(t, ann), "attachments survived")
		require.Equal(t, `{"name":"bob"}:hello`, recv(t, bob))

		// S-R6: a turn in Await prevents hibernation.
		stub, err := env.ns.Get("r")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- core.Do(context.Background(), stub, func(ctx context.Context, c *chat) error {
				return c.st.Sleep(ctx, 30*time.Second)
			})
		}()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 1, env.rt.Stats().Resident, "an Await in flight keeps the object")
		require.NoError(t, <-done)
		time.Sleep(11 * time.Second)
		synctest.Wait()
		require.Zero(t, env.rt.Stats().Resident)
		require.EqualValues(t, 2, env.rt.Stats().Evictions)
		require.EqualValues(t, 2, env.rt.Stats().Constructs)
	})
}

// S-R8 in a bubble: shutdown with hibernated objects still reaches every
// client with 1001, and no goroutine is left behind.
func TestWebSocket_ShutdownWhileHibernated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := openChatPipe(t, core.Options{IdleTimeout: time.Second})
		ann := env.join(t, "r", "ann")
		require.Equal(t, "who:ann", roundTrip(t, ann, "who"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Zero(t, env.rt.Stats().Resident)
		closed := make(chan error, 1)
		go func() { closed <- env.rt.Close() }()
		code, _ := closeCode(t, ann)
		require.Equal(t, core.CloseGoingAway, code)
		ann.Close()
		require.NoError(t, <-closed)
	})
}
