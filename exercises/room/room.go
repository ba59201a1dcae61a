// Package room is exercise 5 of the workshop: the broadcast room over
// hibernatable WebSockets (the original, SEMANTICS R1-R10). One object per
// room name; every member's WebSocket is connected to it; every message is
// numbered, kept, and sent to every member in one order.
//
// Fill in the TODOs, then check your answer:
//
//	go test -tags exercises ./exercises/room
//
// The wire format (the original's JSON(attachment) + ":" + message, with the
// message's offset in front):
//
//	!live N                                   after a join: N is the latest offset
//	1 {"name":"ann","joinedAt":1767225600000}:hello
//
// Part 1: the constructor, Fetch's join, and WebSocketMessage. Keep nothing
// about the members in the Room value: the room is evicted from memory
// while its members stay connected (hibernation), and comes back through
// its constructor. The members are the runtime's list
// (State.WebSockets(Tag)), each with its attachment; the latest offset is
// in storage.
//
// Part 2: ?since=N on a join replays the kept messages after offset N,
// before "!live", so that a client that reconnects misses nothing.
//
// The reference solution is package patterns/room; the tests run against
// it with -tags 'exercises solution'.
package room

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/durable-go/durable/core"
	"github.com/gorilla/websocket"
)

// Wire-format constants.
const (
	Tag        = "room" // every member's connection carries this tag
	Ping       = "ping" // answered by the runtime with Pong, without waking the room
	Pong       = "pong"
	MaxNameLen = 64 // bytes in a member's name
)

var errTODO = errors.New("room: not implemented yet (see the TODO)")

// Options configure the rooms of a namespace.
type Options struct {
	History int // messages kept for ?since= (default 128)
}

// Member is a member's attachment: its JSON prefixes every message it
// sends.
type Member struct {
	Name     string `json:"name"`
	JoinedAt int64  `json:"joinedAt"` // unix ms
}

// Room is one broadcast room.
type Room struct {
	st   *core.State
	opts Options
	last int64 // the latest offset given to a message, read back from storage
}

// Register registers a namespace of rooms in rt.
func Register(rt *core.Runtime, name string, opts Options) (*core.Namespace[*Room], error) {
	if opts.History <= 0 {
		opts.History = 128
	}
	return core.Register(rt, name, func(ctx context.Context, st *core.State) (*Room, error) {
		return newRoom(ctx, st, opts)
	})
}

// Handler routes GET /room/{name} to the room called name.
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

// newRoom runs on every activation of the room: first use, and after every
// hibernation, as the room's first turn; ctx is that turn's.
func newRoom(ctx context.Context, st *core.State, opts Options) (*Room, error) {
	r := &Room{st: st, opts: opts}
	// TODO: make the runtime answer Ping with Pong
	// (st.SetWebSocketAutoResponse); create the table of messages if it does
	// not exist; read the latest offset back into r.last. Storage calls take
	// the turn's ctx (st.Storage().Exec(ctx, ...)).
	return r, nil
}

// Fetch serves GET /room/{name}: a WebSocket upgrade joins the room
// (query: name, and since for part 2); a plain GET returns State as JSON.
func (r *Room) Fetch(ctx context.Context, w http.ResponseWriter, req *http.Request) error {
	if !websocket.IsWebSocketUpgrade(req) {
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(r.State())
	}
	name := req.URL.Query().Get("name")
	if name == "" || len(name) > MaxNameLen || !utf8.ValidString(name) {
		http.Error(w, fmt.Sprintf("name must be 1 to %d bytes of UTF-8", MaxNameLen), http.StatusBadRequest)
		return nil
	}
	since := int64(-1)
	if s := req.URL.Query().Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "since must be an offset", http.StatusBadRequest)
			return nil
		}
		since = n
	}
	_ = since
	// TODO: accept the WebSocket with Tag (r.st.AcceptWebSocket(ctx, ...);
	// if it fails with core.ErrBadHandshake the error answer is written:
	// return nil); keep Member{name, r.st.Now() in ms} as its attachment;
	// (part 2) replay the kept messages after since; send "!live <r.last>"
	// (ws.Send(ctx, core.TextMessage(...)): sends need the turn's ctx).
	return errTODO
}

// WebSocketMessage gives the message the next offset, keeps it, and sends
// "<offset> <JSON(attachment)>:<message>" to every member, the sender
// included, as a frame of the message's type (text or binary).
func (r *Room) WebSocketMessage(ctx context.Context, ws *core.WebSocket, msg core.Message) error {
	// TODO: ws.Attachment() is the JSON to put in front. Store the line
	// with its offset (and forget the ones older than History), then send
	// it to r.st.WebSockets(Tag) with p.Send(ctx, ...): a send outside a
	// turn fails with core.ErrNotInTurn.
	return errTODO
}

// State is what a plain GET of a room returns.
type State struct {
	Offset  int64    `json:"offset"`
	Members []Member `json:"members"`
}

// State returns the room's latest offset and its members, from the
// runtime's list of connections.
func (r *Room) State() State {
	st := State{Offset: r.last, Members: []Member{}}
	for _, ws := range r.st.WebSockets(Tag) {
		var m Member
		if err := ws.DeserializeAttachment(&m); err == nil {
			st.Members = append(st.Members, m)
		}
	}
	return st
}
