package room

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable/core"
	"github.com/gorilla/websocket"
)

// Options configure the rooms of a namespace. The zero value is ready to use.
type Options struct {
	// History is how many of the latest messages a room keeps for members
	// that reconnect with ?since= (default 128). A reconnecting member gets
	// up to History messages at once, so keep it well below
	// core.Options.WebSocketSendQueue (256), or the replay itself trips
	// the slow-client limit.
	History int

	// PruneEvery is how often the stale-connection alarm runs while the
	// room has connections (default 60 s, SEMANTICS R11).
	PruneEvery time.Duration

	// StaleAfter is how long a member may go without a "ping" before the
	// alarm closes its connection with CloseStale (default 90 s). Clients
	// send "ping" every 30 s or so; the runtime answers "pong" without
	// waking the room.
	StaleAfter time.Duration
}

func (o Options) withDefaults() Options {
	if o.History <= 0 {
		o.History = 128
	}
	if o.PruneEvery <= 0 {
		o.PruneEvery = 60 * time.Second
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 90 * time.Second
	}
	return o
}

// Wire-format constants.
const (
	Tag        = "room" // every member's connection carries this tag
	Ping       = "ping" // answered by the runtime with Pong
	Pong       = "pong"
	CloseStale = 4000 // close code for a member that stopped pinging
	MaxNameLen = 64   // bytes in a member's name
)

// Member is a member's attachment: what the room knows of a connection,
// kept by the runtime so that it survives hibernation. Its JSON prefixes
// every message the member sends.
type Member struct {
	Name     string `json:"name"`
	JoinedAt int64  `json:"joinedAt"` // unix ms
}

// Room is a broadcast room: one object per room name, one member per
// WebSocket. Its only state in memory is the latest offset, read back from
// storage by the constructor; the members are the runtime's list of
// connections.
type Room struct {
	st   *core.State
	opts Options
	last int64 // the latest offset given to a message
}

// Register registers a namespace of rooms in rt.
func Register(rt *core.Runtime, name string, opts Options) (*core.Namespace[*Room], error) {
	opts = opts.withDefaults()
	return core.Register(rt, name, func(ctx context.Context, st *core.State) (*Room, error) {
		return newRoom(ctx, st, opts)
	})
}

// migrations is the room's schema, in order; step 1 is what the constructor
// ran before it used migrations.
var migrations = []core.Migration{
	core.SQL(`CREATE TABLE IF NOT EXISTS room_messages(
  seq INTEGER PRIMARY KEY,   -- the message's offset: 1, 2, 3, ...
  line BLOB NOT NULL,        -- the frame as members receive it
  binary INTEGER NOT NULL)`),
}

// newRoom runs on every activation of the room: first use, and after every
// hibernation. It rebuilds memory from storage and never arms the alarm
// (a join does), so that waking an idle room costs nothing more.
func newRoom(ctx context.Context, st *core.State, opts Options) (*Room, error) {
	if err := st.SetWebSocketAutoResponse(Ping, Pong); err != nil {
		return nil, err
	}
	s := st.Storage()
	if err := s.Migrate(ctx, migrations...); err != nil {
		return nil, err
	}
	r := &Room{st: st, opts: opts}
	if err := s.QueryRow(ctx, "SELECT coalesce(max(seq), 0) FROM room_messages").Scan(&r.last); err != nil {
		return nil, err
	}
	return r, nil
}

// Fetch serves GET /room/{name}: a WebSocket upgrade joins the room; a
// plain GET returns the room's state as JSON (see State).
//
// A join takes the query parameters name (the member's name, at most
// MaxNameLen bytes) and since (the last offset the client received). With
// since, the messages after it are replayed first, in order, or "!gap" says
// the history no longer reaches back that far; then "!live N" says that
// what follows is live.
func (r *Room) Fetch(ctx context.Context, w http.ResponseWriter, req *http.Request) error {
	if !websocket.IsWebSocketUpgrade(req) {
		st, err := r.State()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(st)
	}
	q := req.URL.Query()
	name := q.Get("name")
	if name == "" || len(name) > MaxNameLen || !utf8.ValidString(name) {
		http.Error(w, fmt.Sprintf("name must be 1 to %d bytes of UTF-8", MaxNameLen), http.StatusBadRequest)
		return nil
	}
	since := int64(-1)
	if s := q.Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "since must be an offset", http.StatusBadRequest)
			return nil
		}
		since = n
	}
	ws, err := r.st.AcceptWebSocket(ctx, w, req, Tag)
	if errors.Is(err, core.ErrBadHandshake) {
		return nil // the error response is written
	}
	if err != nil {
		return err
	}
	if err := ws.SerializeAttachment(Member{Name: name, JoinedAt: r.st.Now().UnixMilli()}); err != nil {
		return err
	}
	if since >= 0 {
		if err := r.replay(ctx, ws, since); err != nil {
			return err
		}
	}
	if err := ws.Send(ctx, core.TextMessage("!live "+strconv.FormatInt(r.last, 10))); err != nil {
		return err
	}
	return r.armPrune(ctx)
}

// replay sends ws the kept messages after since, in order. The sends leave
// after this turn commits and before any later turn's, so live messages
// follow them with neither a gap nor a duplicate. A text row that is not
// UTF-8 (a directory written before the runtime refused such messages)
// is repaired, never sent as it is: a browser drops the connection on it,
// and would meet it again at every reconnect with ?since=.
func (r *Room) replay(ctx context.Context, ws *core.WebSocket, since int64) error {
	if since >= r.last {
		return nil
	}
	s := r.st.Storage()
	var first int64
	if err := s.QueryRow(ctx, "SELECT coalesce(min(seq), 0) FROM room_messages").Scan(&first); err != nil {
		return err
	}
	if since+1 < first {
		if err := ws.Send(ctx, core.TextMessage(fmt.Sprintf("!gap %d %d", since, first))); err != nil {
			return err
		}
	}
	rows, err := s.Query(ctx, "SELECT line, binary FROM room_messages WHERE seq > ? ORDER BY seq", since)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var m core.Message
		if err := rows.Scan(&m.Data, &m.Binary); err != nil {
			return err
		}
		if err := ws.Send(ctx, validText(m)); err != nil {
			return err
		}
	}
	return rows.Err()
}

// WebSocketMessage gives the message the next offset, keeps it in the
// history and sends it to every member, the sender included, as
// "<offset> <JSON(attachment)>:<message>" (SEMANTICS R10, plus the offset).
func (r *Room) WebSocketMessage(ctx context.Context, ws *core.WebSocket, msg core.Message) error {
	from, err := ws.Attachment()
	if err != nil {
		return err
	}
	off := r.last + 1
	line := make([]byte, 0, 24+len(from)+len(msg.Data))
	line = strconv.AppendInt(line, off, 10)
	line = append(line, ' ')
	line = append(line, from...)
	line = append(line, ':')
	line = append(line, msg.Data...)
	s := r.st.Storage()
	if _, err := s.Exec(ctx, "INSERT INTO room_messages(seq, line, binary) VALUES (?, ?, ?)", off, line, msg.Binary); err != nil {
		return err
	}
	if _, err := s.Exec(ctx, "DELETE FROM room_messages WHERE seq <= ?", off-int64(r.opts.History)); err != nil {
		return err
	}
	r.last = off
	out := core.Message{Data: line, Binary: msg.Binary}
	for _, p := range r.st.WebSockets(Tag) {
		p.Send(ctx, out) // an error means p closed meanwhile: it is no member any more
	}
	return nil
}

// validText returns m with every invalid UTF-8 sequence of a text message
// replaced by U+FFFD: a text frame must be UTF-8 (RFC 6455), and a client
// closes the connection on one that is not.
func validText(m core.Message) core.Message {
	if !m.Binary && !utf8.Valid(m.Data) {
		m.Data = bytes.ToValidUTF8(m.Data, []byte("\uFFFD"))
	}
	return m
}

// Alarm prunes stale connections: members that have not pinged for
// StaleAfter (nor joined within it) are closed with CloseStale. It re-arms
// only while connections remain, so a room nobody watches is never woken
// (SEMANTICS R11).
func (r *Room) Alarm(ctx context.Context, info core.AlarmInfo) error {
	now := r.st.Now()
	left := 0
	for _, ws := range r.st.WebSockets(Tag) {
		var m Member
		if err := ws.DeserializeAttachment(&m); err != nil {
			continue // closed meanwhile
		}
		seen := time.UnixMilli(m.JoinedAt)
		if t := ws.AutoResponseTimestamp(); t.After(seen) {
			seen = t
		}
		if now.Sub(seen) > r.opts.StaleAfter {
			ws.Close(ctx, CloseStale, "stale: no ping")
			continue
		}
		left++
	}
	if left == 0 {
		return nil
	}
	return r.st.SetAlarm(ctx, now.Add(r.opts.PruneEvery))
}

// NextPrune returns when the pruning alarm runs next, and false if it is
// not armed (the room has had no connection since it last ran).
func (r *Room) NextPrune(ctx context.Context) (time.Time, bool, error) { return r.st.GetAlarm(ctx) }

// armPrune arms the pruning alarm unless it is pending.
func (r *Room) armPrune(ctx context.Context) error {
	if _, ok, err := r.st.GetAlarm(ctx); err != nil || ok {
		return err
	}
	return r.st.SetAlarm(ctx, r.st.Now().Add(r.opts.PruneEvery))
}

// State is what a plain GET of a room returns.
type State struct {
	Offset  int64    `json:"offset"`  // the latest message's offset
	Members []Member `json:"members"` // in the order they joined
}

// State returns the room's latest offset and its members, rebuilt from
// the runtime's list of connections (never from memory: after a
// hibernation there is none).
func (r *Room) State() (State, error) {
	st := State{Offset: r.last, Members: []Member{}}
	for _, ws := range r.st.WebSockets(Tag) {
		var m Member
		if err := ws.DeserializeAttachment(&m); err != nil {
			continue
		}
		st.Members = append(st.Members, m)
	}
	return st, nil
}

// Handler routes GET /room/{name} to the room called name: mount it on a
// server's mux (mux.Handle("/room/", room.Handler(rooms))).
func Handler(rooms *core.Namespace[*Room]) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /room/{name}", func(w http.ResponseWriter, req *http.Request) {
		stub, err := rooms.Get(req.PathValue("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		stub.ServeHTTP(w, req)
	})
	return mux
}
