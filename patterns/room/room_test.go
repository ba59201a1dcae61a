package room_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/patterns/room"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	rt    *core.Runtime
	rooms *core.Namespace[*room.Room]
	base  string // ws://host
	http  string // http://host
	dial  *websocket.Dialer
	get   func(path string) (*http.Response, error)
}

func openRT(t testing.TB, opts core.Options, ropts room.Options) (*core.Runtime, *core.Namespace[*room.Room]) {
	t.Helper()
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	rooms, err := room.Register(rt, "rooms", ropts)
	require.NoError(t, err)
	return rt, rooms
}

// open serves rooms on a loopback listener.
func open(t testing.TB, opts core.Options, ropts room.Options) *env {
	t.Helper()
	rt, rooms := openRT(t, opts, ropts)
	srv := httptest.NewServer(room.Handler(rooms))
	t.Cleanup(srv.Close)
	return &env{rt: rt, rooms: rooms, base: "ws" + strings.TrimPrefix(srv.URL, "http"), http: srv.URL,
		dial: websocket.DefaultDialer, get: srv.Client().Get}
}

// openPipe serves rooms over net.Pipe, for synctest bubbles.
func openPipe(t testing.TB, opts core.Options, ropts room.Options) *env {
	t.Helper()
	rt, rooms := openRT(t, opts, ropts)
	pl := coretest.NewPipeListener()
	hs := &http.Server{Handler: room.Handler(rooms)}
	served := make(chan struct{})
	go func() { defer close(served); hs.Serve(pl) }()
	t.Cleanup(func() { hs.Close(); <-served })
	client := &http.Client{Transport: &http.Transport{DialContext: pl.Dial}}
	t.Cleanup(client.CloseIdleConnections)
	return &env{rt: rt, rooms: rooms, base: "ws://pipe", http: "http://pipe",
		dial: &websocket.Dialer{NetDialContext: pl.Dial}, get: client.Get}
}

// join connects a member and reads up to "!live N"; it returns the
// connection, the frames before the notice and N.
func (e *env) join(t testing.TB, name, member string, since int64) (*websocket.Conn, []string, int64) {
	t.Helper()
	u := e.base + "/room/" + name + "?name=" + member
	if since >= 0 {
		u += "&since=" + strconv.FormatInt(since, 10)
	}
	c, _, err := e.dial.Dial(u, nil)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	var before []string
	for {
		f := recv(t, c)
		if n, ok := strings.CutPrefix(f, "!live "); ok {
			live, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
			return c, before, live
		}
		before = append(before, f)
	}
}

func (e *env) state(t testing.TB, name string) room.State {
	t.Helper()
	resp, err := e.get(e.http + "/room/" + name)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st room.State
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

func send(t testing.TB, c *websocket.Conn, text string) {
	t.Helper()
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(text)))
}

func recv(t testing.TB, c *websocket.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // only fails a stuck test
	_, b, err := c.ReadMessage()
	require.NoError(t, err)
	return string(b)
}

// delivery reads one frame and parses it as a message.
func delivery(t testing.TB, c *websocket.Conn) (room.Delivery, room.Member) {
	t.Helper()
	f := recv(t, c)
	d, ok, err := room.ParseDelivery([]byte(f), false)
	require.NoError(t, err)
	require.True(t, ok, "a message, not %q", f)
	var m room.Member
	require.NoError(t, json.Unmarshal(d.From, &m))
	return d, m
}

// S-R10: two members both receive hello, as
// <offset> JSON(attachment) ":" message.
func TestRoom_Broadcast(t *testing.T) {
	e := open(t, core.Options{}, room.Options{})
	ann, _, live := e.join(t, "lobby", "ann", -1)
	require.Zero(t, live)
	bob, _, _ := e.join(t, "lobby", "bob", -1)
	before := time.Now().UnixMilli()
	send(t, ann, "hello")
	for _, c := range []*websocket.Conn{ann, bob} {
		f := recv(t, c)
		require.Regexp(t, `^1 \{"name":"ann","joinedAt":\d+\}:hello$`, f)
		d, ok, err := room.ParseDelivery([]byte(f), false)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(1), d.Offset)
		require.Equal(t, "hello", string(d.Data))
		var m room.Member
		require.NoError(t, json.Unmarshal(d.From, &m))
		require.Equal(t, "ann", m.Name)
		require.LessOrEqual(t, m.JoinedAt, before)
	}
	st := e.state(t, "lobby")
	require.Equal(t, int64(1), st.Offset)
	require.Len(t, st.Members, 2)
	require.Equal(t, "ann", st.Members[0].Name)
	require.Equal(t, "bob", st.Members[1].Name)
}

// S-R3: ping gets pong from the runtime, without a constructor or a turn.
func TestRoom_PingWithoutWaking(t *testing.T) {
	e := open(t, core.Options{}, room.Options{})
	ann, _, _ := e.join(t, "r", "ann", -1)
	before := e.rt.Stats()
	for range 5 {
		send(t, ann, room.Ping)
		require.Equal(t, room.Pong, recv(t, ann))
	}
	after := e.rt.Stats()
	require.Equal(t, before.Constructs, after.Constructs)
	require.Equal(t, before.Turns, after.Turns)
}

// A member that disconnects, misses 10 messages and reconnects with its
// last offset receives exactly those 10, in order, before live messages.
func TestRoom_ReconnectGetsWhatItMissed(t *testing.T) {
	e := open(t, core.Options{}, room.Options{})
	ann, _, _ := e.join(t, "r", "ann", -1)
	bob, _, _ := e.join(t, "r", "bob", -1)
	send(t, ann, "m1")
	delivery(t, ann)
	d, _ := delivery(t, bob)
	require.Equal(t, int64(1), d.Offset)
	last := d.Offset
	bob.Close()

	for i := 2; i <= 11; i++ {
		send(t, ann, fmt.Sprint("m", i))
		d, _ := delivery(t, ann) // handled and durable
		require.Equal(t, int64(i), d.Offset)
	}

	bob, replay, live := e.join(t, "r", "bob", last)
	require.Equal(t, int64(11), live)
	require.Len(t, replay, 10)
	for i, f := range replay {
		d, ok, err := room.ParseDelivery([]byte(f), false)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(i+2), d.Offset)
		require.Equal(t, fmt.Sprint("m", i+2), string(d.Data))
	}
	send(t, ann, "m12")
	d, _ = delivery(t, bob)
	require.Equal(t, int64(12), d.Offset, "then live, with no duplicate")
	require.Equal(t, "m12", string(d.Data))
}

// A member whose offset is older than the history is told so.
func TestRoom_HistoryGap(t *testing.T) {
	e := open(t, core.Options{}, room.Options{History: 5})
	ann, _, _ := e.join(t, "r", "ann", -1)
	for i := 1; i <= 10; i++ {
		send(t, ann, fmt.Sprint("m", i))
		delivery(t, ann)
	}
	_, replay, live := e.join(t, "r", "bob", 0)
	require.Equal(t, int64(10), live)
	require.Equal(t, "!gap 0 6", replay[0])
	require.Len(t, replay, 6)
	require.True(t, strings.HasPrefix(replay[1], "6 "), replay[1])
	require.True(t, strings.HasPrefix(replay[5], "10 "), replay[5])

	// Bad requests.
	for _, q := range []string{"", "?name=" + strings.Repeat("n", 65), "?name=x&since=-1", "?name=x&since=z"} {
		_, resp, err := e.dial.Dial(e.base+"/room/r"+q, nil)
		require.Error(t, err, q)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
}

// S-R5: after the room hibernates, the next event re-runs the constructor
// and finds the members (names and join times) intact, from the runtime.
func TestRoom_Hibernation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openPipe(t, core.Options{}, room.Options{})
		ann, _, _ := e.join(t, "r", "ann", -1)
		bob, _, _ := e.join(t, "r", "bob", -1)
		send(t, ann, "m1")
		delivery(t, bob)
		delivery(t, ann)
		st0 := e.state(t, "r")
		require.Len(t, st0.Members, 2)
		constructs := e.rt.Stats().Constructs

		time.Sleep(11 * time.Second)
		synctest.Wait()
		require.Zero(t, e.rt.Stats().Resident, "hibernated")

		st := e.state(t, "r")
		require.Equal(t, constructs+1, e.rt.Stats().Constructs, "woken: the constructor ran again")
		require.Equal(t, st0, st, "members, join times and offset intact")

		send(t, bob, "m2")
		d, m := delivery(t, ann)
		require.Equal(t, int64(2), d.Offset, "the offset was rebuilt from storage")
		require.Equal(t, "bob", m.Name)
		delivery(t, bob)
	})
}

// S-R11: the pruning alarm runs every 60 s while the room has connections,
// closes members that stopped pinging, and stops re-arming once the last
// connection is gone: an unwatched room is never woken again.
func TestRoom_PruneAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openPipe(t, core.Options{}, room.Options{})
		t0 := time.Now()
		pinger, _, _ := e.join(t, "r", "pinger", -1)
		silent, _, _ := e.join(t, "r", "silent", -1)
		stub, err := e.rooms.Get("r")
		require.NoError(t, err)
		alarm := func() (time.Time, bool) { return alarmOf(t, stub) }
		at, ok := alarm()
		require.True(t, ok)
		require.Equal(t, t0.Add(60*time.Second), at, "a join arms the alarm")

		ping := func() {
			send(t, pinger, room.Ping)
			require.Equal(t, room.Pong, recv(t, pinger))
		}
		time.Sleep(45 * time.Second)
		ping()
		time.Sleep(16 * time.Second) // t0+61: the first run kept both
		synctest.Wait()
		require.Len(t, e.state(t, "r").Members, 2)
		at, ok = alarm()
		require.True(t, ok)
		require.Equal(t, t0.Add(120*time.Second), at, "re-armed")

		time.Sleep(39 * time.Second) // t0+100
		ping()
		time.Sleep(21 * time.Second) // t0+121: silent is 121 s old
		synctest.Wait()
		silent.SetReadDeadline(time.Now().Add(time.Second))
		_, _, err = silent.ReadMessage()
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, room.CloseStale, ce.Code)
		silent.Close()
		st := e.state(t, "r")
		require.Len(t, st.Members, 1)
		require.Equal(t, "pinger", st.Members[0].Name)

		time.Sleep(9 * time.Second) // t0+130: the last member leaves
		pinger.Close()
		time.Sleep(51 * time.Second) // t0+181: the run found nobody
		synctest.Wait()
		require.Zero(t, e.rt.Stats().Alarms, "no re-arm without connections")
		constructs := e.rt.Stats().Constructs
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		require.Equal(t, constructs, e.rt.Stats().Constructs, "never woken again")
		require.Zero(t, e.rt.Stats().Resident)
	})
}

func alarmOf(t testing.TB, stub *core.Stub[*room.Room]) (time.Time, bool) {
	t.Helper()
	var ok bool
	at, err := core.Call(context.Background(), stub, func(ctx context.Context, r *room.Room) (time.Time, error) {
		at, pending, err := r.NextPrune(ctx)
		ok = pending
		return at, err
	})
	require.NoError(t, err)
	return at, ok
}

// S-R8: a restart closes every connection with 1001; Follow reconnects
// with ?since= and its callback sees every message once, in order.
func TestFollow_AcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	start := func(ln net.Listener) (*core.Runtime, func()) {
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		rooms, err := room.Register(rt, "rooms", room.Options{})
		require.NoError(t, err)
		hs := &http.Server{Handler: room.Handler(rooms)}
		var wg sync.WaitGroup
		wg.Go(func() { hs.Serve(ln) })
		return rt, func() { rt.Close(); hs.Close(); wg.Wait() }
	}
	_, stop1 := start(ln)

	got := make(chan room.Delivery, 100)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() {
		followed <- room.Follow(ctx, "ws://"+addr+"/room/r?name=follower", 0, func(d room.Delivery) error {
			got <- d
			return nil
		})
	}()
	next := func() room.Delivery {
		select {
		case d := <-got:
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery within 10 s")
			return room.Delivery{}
		}
	}

	speak := func(from, to int) {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/room/r?name=ann", nil)
		require.NoError(t, err)
		defer c.Close()
		for i := from; i <= to; i++ {
			send(t, c, fmt.Sprint("m", i))
		}
		// Hang up only once the room has the last one: a client that closes
		// with unread frames resets the connection, and the server may then
		// lose what it had not read yet.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, frame, err := c.ReadMessage()
			require.NoError(t, err)
			if bytes.HasSuffix(frame, []byte(fmt.Sprint(":m", to))) {
				return
			}
		}
	}
	speak(1, 3)
	for i := 1; i <= 3; i++ {
		d := next()
		require.Equal(t, int64(i), d.Offset)
		require.Equal(t, fmt.Sprint("m", i), string(d.Data))
	}

	stop1() // the follower gets 1001
	ln2, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	_, stop2 := start(ln2)
	defer stop2()
	speak(4, 6)
	for i := 4; i <= 6; i++ {
		d := next()
		require.Equal(t, int64(i), d.Offset)
		require.Equal(t, fmt.Sprint("m", i), string(d.Data))
	}
	cancel()
	require.ErrorIs(t, <-followed, context.Canceled)
	require.Empty(t, got, "no duplicates")
}

// A history row that is not UTF-8, as a directory written before the
// runtime refused such messages may hold, is repaired on replay: every
// text frame a member gets is UTF-8, so a browser does not drop the
// connection at each reconnect.
func TestRoom_ReplayRepairsABadRow(t *testing.T) {
	dir := t.TempDir()
	rt, rooms := openRT(t, core.Options{Dir: dir}, room.Options{})
	srv := httptest.NewServer(room.Handler(rooms))
	e := &env{rt: rt, rooms: rooms, base: "ws" + strings.TrimPrefix(srv.URL, "http"), dial: websocket.DefaultDialer}
	ann, _, _ := e.join(t, "old", "ann", -1)
	send(t, ann, "before")
	_, m := delivery(t, ann)
	ann.Close()
	srv.Close()
	require.NoError(t, rt.Close())

	// The older directory: a second row, written as it came.
	files, err := filepath.Glob(filepath.Join(dir, "rooms", "*.sqlite"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	db, err := sql.Open("sqlite", files[0])
	require.NoError(t, err)
	from, err := json.Marshal(m)
	require.NoError(t, err)
	bad := append([]byte("2 "+string(from)+":caf"), 0xe9) // Latin-1 é
	_, err = db.Exec("INSERT INTO room_messages(seq, line, binary) VALUES (2, ?, 0)", bad)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	rt2, rooms2 := openRT(t, core.Options{Dir: dir}, room.Options{})
	srv2 := httptest.NewServer(room.Handler(rooms2))
	t.Cleanup(srv2.Close)
	e2 := &env{rt: rt2, rooms: rooms2, base: "ws" + strings.TrimPrefix(srv2.URL, "http"), dial: websocket.DefaultDialer}
	for range 2 { // the same replay at every reconnect
		c, replayed, live := e2.join(t, "old", "bob", 0)
		require.Equal(t, int64(2), live)
		require.Len(t, replayed, 2)
		for _, f := range replayed {
			require.True(t, utf8.ValidString(f), "a text frame that is not UTF-8: %q", f)
		}
		require.True(t, strings.HasSuffix(replayed[0], ":before"), replayed[0])
		require.True(t, strings.HasSuffix(replayed[1], ":caf\uFFFD"), replayed[1])
		c.Close()
	}
}

func TestParseDelivery(t *testing.T) {
	for _, tc := range []struct {
		frame  string
		ok     bool
		off    int64
		from   string
		data   string
		hasErr bool
	}{
		{`7 {"name":"a:b","joinedAt":1}:hi: there`, true, 7, `{"name":"a:b","joinedAt":1}`, "hi: there", false},
		{`1 {"name":"x"}:`, true, 1, `{"name":"x"}`, "", false},
		{`!live 3`, false, 0, "", "", false},
		{`x {}:y`, false, 0, "", "", true},
		{`1 {"name":`, false, 0, "", "", true},
		{`1 {"name":"x"}y`, false, 0, "", "", true},
		{`nospace`, false, 0, "", "", true},
	} {
		d, ok, err := room.ParseDelivery([]byte(tc.frame), false)
		require.Equal(t, tc.hasErr, err != nil, "%q: err %v", tc.frame, err)
		require.Equal(t, tc.ok, ok, tc.frame)
		if ok {
			require.Equal(t, tc.off, d.Offset)
			require.Equal(t, tc.from, string(d.From))
			require.Equal(t, tc.data, string(d.Data))
		}
	}
}
