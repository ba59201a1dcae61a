//go:build exercises

package room_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/gorilla/websocket"
)

// env serves the rooms over net.Pipe, inside a synctest bubble: the room's
// hibernation takes no time and every run is the same.
type env struct {
	rt   *core.Runtime
	pipe *coretest.PipeListener
	logs *logBuffer // what the runtime logged: why a join failed, for one
}

// logBuffer keeps the runtime's log lines for a failing test to print.
type logBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func open(t *testing.T, opts core.Options) *env {
	t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	rt := coretest.Open(t, opts)
	h, err := rooms(rt)
	if err != nil {
		t.Fatal(err)
	}
	pl := coretest.NewPipeListener()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(pl) }()
	t.Cleanup(func() { srv.Close(); <-served })
	return &env{rt: rt, pipe: pl, logs: logs}
}

// join connects name to room with the query q ("" or "since=N").
func (e *env) join(t *testing.T, room, name, q string) *websocket.Conn {
	t.Helper()
	c, resp, err := e.dial(room, name, q)
	if err != nil {
		status, body := 0, ""
		if resp != nil {
			status = resp.StatusCode
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			body = strings.TrimSpace(string(b))
		}
		// The answer of a failed Fetch is a bare 500: the reason is in the
		// runtime's log.
		t.Fatalf("%s joins %s: %v (HTTP %d %s)\nthe server logged:\n%s", name, room, err, status, body, e.logs)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) dial(room, name, q string) (*websocket.Conn, *http.Response, error) {
	d := &websocket.Dialer{NetDialContext: e.pipe.Dial}
	url := "ws://pipe/room/" + room + "?name=" + name
	if q != "" {
		url += "&" + q
	}
	return d.Dial(url, nil)
}

// next reads the next text frame.
func next(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	typ, b, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	if typ != websocket.TextMessage {
		t.Fatalf("got a frame of type %d, want text", typ)
	}
	return string(b)
}

func send(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// frame is one parsed message frame.
type frame struct {
	offset int64
	from   struct {
		Name     string `json:"name"`
		JoinedAt int64  `json:"joinedAt"`
	}
	text string
}

// parse parses "<offset> <JSON(attachment)>:<message>".
func parse(t *testing.T, s string) frame {
	t.Helper()
	var f frame
	sp := strings.IndexByte(s, ' ')
	if sp < 0 {
		t.Fatalf("frame %q: no space after the offset", s)
	}
	var err error
	if f.offset, err = strconv.ParseInt(s[:sp], 10, 64); err != nil {
		t.Fatalf("frame %q: bad offset", s)
	}
	dec := json.NewDecoder(strings.NewReader(s[sp+1:]))
	if err := dec.Decode(&f.from); err != nil {
		t.Fatalf("frame %q: bad attachment: %v", s, err)
	}
	rest := s[sp+1+int(dec.InputOffset()):]
	if !strings.HasPrefix(rest, ":") {
		t.Fatalf("frame %q: no ':' after the attachment", s)
	}
	f.text = rest[1:]
	return f
}

func expectLive(t *testing.T, c *websocket.Conn, n int) {
	t.Helper()
	if got, want := next(t, c), "!live "+strconv.Itoa(n); got != want {
		t.Fatalf("after the join: got %q, want %q", got, want)
	}
}

func expectMessage(t *testing.T, c *websocket.Conn, offset int64, from, text string) frame {
	t.Helper()
	f := parse(t, next(t, c))
	if f.offset != offset || f.from.Name != from || f.text != text {
		t.Fatalf("got #%d from %s: %q; want #%d from %s: %q", f.offset, f.from.Name, f.text, offset, from, text)
	}
	return f
}

func TestRoom_AJoinEndsWithLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		expectLive(t, e.join(t, "lobby", "ann", ""), 0)
	})
}

// SEMANTICS R1, R4, R10: every member, the sender included, gets every
// message, numbered, in one order, with the sender's attachment.
func TestRoom_EveryMemberGetsEveryMessageInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		annJoined := time.Now().UnixMilli()
		ann := e.join(t, "lobby", "ann", "")
		expectLive(t, ann, 0)
		time.Sleep(time.Second)
		bob := e.join(t, "lobby", "bob", "")
		expectLive(t, bob, 0)
		for i, m := range []struct{ from, text string }{{"ann", "hello"}, {"bob", "hi ann"}, {"ann", "bye"}} {
			sender := map[string]*websocket.Conn{"ann": ann, "bob": bob}[m.from]
			send(t, sender, m.text)
			for _, c := range []*websocket.Conn{ann, bob} {
				f := expectMessage(t, c, int64(i+1), m.from, m.text)
				if m.from == "ann" && f.from.JoinedAt != annJoined {
					t.Errorf("ann's attachment says joinedAt %d, want %d (ms when she joined)", f.from.JoinedAt, annJoined)
				}
			}
		}
		// Another room is another object: its offsets start at 1.
		carl := e.join(t, "kitchen", "carl", "")
		expectLive(t, carl, 0)
		send(t, carl, "anyone?")
		expectMessage(t, carl, 1, "carl", "anyone?")
	})
}

// SEMANTICS R3: "ping" is answered "pong" by the runtime: not numbered,
// not broadcast.
func TestRoom_PingIsAnsweredWithPong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		ann := e.join(t, "lobby", "ann", "")
		expectLive(t, ann, 0)
		bob := e.join(t, "lobby", "bob", "")
		expectLive(t, bob, 0)
		send(t, ann, "ping")
		if got := next(t, ann); got != "pong" {
			t.Fatalf("ping: got %q, want pong", got)
		}
		send(t, ann, "after the ping")
		expectMessage(t, bob, 1, "ann", "after the ping") // bob saw no ping, and it took no offset
	})
}

func TestRoom_AJoinNeedsAName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		for _, name := range []string{"", strings.Repeat("n", 65)} {
			c, resp, err := e.dial("lobby", name, "")
			if err == nil {
				c.Close()
				t.Errorf("join with name %q: accepted, want 400", name)
				continue
			}
			if resp == nil || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("join with name %q: %v, want HTTP 400", name, err)
			}
		}
	})
}

// A plain GET returns the room's offset and its members.
func TestRoom_StateListsTheMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		ann := e.join(t, "lobby", "ann", "")
		expectLive(t, ann, 0)
		expectLive(t, e.join(t, "lobby", "bob", ""), 0)
		send(t, ann, "hello")
		next(t, ann)
		client := &http.Client{Transport: &http.Transport{DialContext: e.pipe.Dial}}
		resp, err := client.Get("http://pipe/room/lobby")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Offset  int64 `json:"offset"`
			Members []struct {
				Name string `json:"name"`
			} `json:"members"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Offset != 1 || len(st.Members) != 2 || st.Members[0].Name != "ann" || st.Members[1].Name != "bob" {
			t.Errorf("GET /room/lobby: got %+v, want offset 1 and members ann, bob", st)
		}
		client.CloseIdleConnections()
	})
}

// SEMANTICS R5: the idle room is evicted from memory while its members
// stay connected; the next message brings it back, and nothing is lost:
// the offsets go on, the attachments are there.
func TestRoom_ComesBackFromHibernation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{IdleTimeout: 10 * time.Second})
		ann := e.join(t, "lobby", "ann", "")
		expectLive(t, ann, 0)
		bob := e.join(t, "lobby", "bob", "")
		expectLive(t, bob, 0)
		send(t, ann, "one")
		expectMessage(t, ann, 1, "ann", "one")
		expectMessage(t, bob, 1, "ann", "one")
		constructs := e.rt.Stats().Constructs
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Resident; got != 0 {
			t.Fatalf("%d objects in memory after 30 idle seconds, want 0 (hibernated)", got)
		}
		send(t, bob, "two")
		expectMessage(t, ann, 2, "bob", "two")
		expectMessage(t, bob, 2, "bob", "two")
		if e.rt.Stats().Constructs == constructs {
			t.Error("the room was not rebuilt by its constructor")
		}
	})
}

// Part 2: a member that reconnects with ?since= gets what it missed, in
// order, before "!live".
func TestRoom_ReconnectingWithSinceReplaysWhatWasMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		ann := e.join(t, "lobby", "ann", "")
		expectLive(t, ann, 0)
		for i, text := range []string{"a", "b", "c"} {
			send(t, ann, text)
			expectMessage(t, ann, int64(i+1), "ann", text)
		}
		bob := e.join(t, "lobby", "bob", "since=1")
		expectMessage(t, bob, 2, "ann", "b")
		expectMessage(t, bob, 3, "ann", "c")
		expectLive(t, bob, 3)
		send(t, ann, "d")
		expectMessage(t, bob, 4, "ann", "d")
		// since the latest offset: nothing to replay.
		carl := e.join(t, "lobby", "carl", "since=4")
		expectLive(t, carl, 4)
	})
}
