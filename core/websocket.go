package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable/core/internal/telemetry"
	"github.com/durable-go/durable/core/internal/wsconn"
)

// Limits of the WebSocket API (those of the original runtime).
const (
	MaxAttachmentLen   = 16384 // bytes of an attachment, as JSON (SEMANTICS R4)
	MaxTags            = 10    // tags per connection
	MaxTagLen          = 256   // bytes in a tag
	MaxAutoResponseLen = 2048  // bytes in an auto-response request or response
)

// Close codes the runtime sends (and 1002 when the client broke the protocol). An object closing a
// connection itself may use 1000 or a code from 3000 to 4999.
const (
	CloseNormal         = 1000 // a normal close
	CloseGoingAway      = 1001 // Runtime.Close: every connection, on shutdown (R8)
	CloseNoStatus       = 1005 // reported to WebSocketClose: the peer's Close frame had no code
	CloseAbnormal       = 1006 // reported to WebSocketClose: the connection dropped without a Close frame
	CloseInvalidText    = 1007 // a text message that is not valid UTF-8 (never delivered)
	CloseMessageTooBig  = 1009 // a message over Options.WebSocketMaxMessage (1 MiB)
	CloseInternalError  = 1011 // a handler failed, or the turn that accepted the connection did
	CloseServiceRestart = 1012 // cluster mode: the object moved and the connection could not follow it; reconnect
	CloseTryAgainLater  = 1013 // the client fell behind its send queue, or the object's queue was full
)

// A Message is one WebSocket message: text (UTF-8) or binary. A binary one is
// Message{Data: b, Binary: true}; string(m.Data) is a text one's text.
type Message struct {
	Data   []byte
	Binary bool
}

// TextMessage returns a text message holding s: ws.Send(ctx, core.TextMessage("hello")).
func TextMessage(s string) Message { return Message{Data: []byte(s)} }

// WebSocketMessageHandler is implemented by objects that receive their WebSockets' messages, each
// as a turn of its own, atomic and output-gated like a call. If it fails (error or panic), the turn
// is rolled back (sends and closes dropped), the error logged and the connection closed with 1011.
type WebSocketMessageHandler interface {
	WebSocketMessage(ctx context.Context, ws *WebSocket, msg Message) error
}

// WebSocketCloseHandler is implemented by objects that want to know when a client ends its
// connection: it sent a Close frame (code and reason are its own; the runtime has answered it
// already, SEMANTICS R9) or the connection dropped (CloseAbnormal). The handle is no longer listed
// by State.WebSockets; its attachment is readable during the handler, gone after it. A close the
// object made is not reported, and an object without the handler is not woken for it.
type WebSocketCloseHandler interface {
	WebSocketClose(ctx context.Context, ws *WebSocket, code int, reason string) error
}

// WebSocketErrorHandler is implemented by objects that want to know when the runtime closed one of
// their connections for an error: a message over the size limit (ErrTooLarge, 1009), a text message
// that is not valid UTF-8 (ErrInvalidText, 1007), a client too slow to keep up (ErrSlowClient,
// 1013), or a protocol violation (1002). The attachment is readable during the handler.
type WebSocketErrorHandler interface {
	WebSocketError(ctx context.Context, ws *WebSocket, err error) error
}

// AcceptWebSocket upgrades the request to a WebSocket whose connection the runtime owns and returns
// the object's handle to it. Call it from a turn (Fetch, run by Stub.ServeHTTP, or any call handed
// w and r); tags (at most MaxTags of MaxTagLen bytes) select it in State.WebSockets. The upgrade
// happens at once, but the accept is part of the turn: if the turn fails, the connection is closed
// with 1011 and never listed again. The client's messages are turns queued behind this one. If the
// handshake fails (not an upgrade, a foreign Origin: see Options.WebSocketOrigins), the error
// response is written to w and the error wraps ErrBadHandshake; return nil from Fetch to send it.
func (st *State) AcceptWebSocket(ctx context.Context, w http.ResponseWriter, r *http.Request, tags ...string) (*WebSocket, error) {
	o := st.o
	t, err := o.inTurn(ctx)
	if err != nil {
		return nil, err
	}
	if len(tags) > MaxTags {
		return nil, fmt.Errorf("core: AcceptWebSocket: %d tags (limit %d)", len(tags), MaxTags)
	}
	for _, tag := range tags {
		if tag == "" || len(tag) > MaxTagLen {
			return nil, fmt.Errorf("core: AcceptWebSocket: tag of %d bytes (must be 1 to %d)", len(tag), MaxTagLen)
		}
	}
	if eu, ok := r.Context().Value(edgeKey{}).(*edgeUpgrade); ok { // upgraded at another node, the edge
		return acceptRelayed(t, eu, tags)
	}
	rt := o.rt
	ws := &WebSocket{rt: rt, ns: o.ns, name: o.name, id: o.id, tags: slices.Clone(tags), inflight: make(chan struct{}, wsInFlight)}
	ws.c, err = wsconn.Upgrade(rt.ws.upgrader(rt), w, r, wsconn.Options{
		ReadLimit: rt.opts.WebSocketMaxMessage, Queue: rt.opts.WebSocketSendQueue,
		Slow: ErrSlowClient, BadText: ErrInvalidText, OnClose: func() { rt.ws.unlist(ws) },
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHandshake, err)
	}
	ws.noClose, ws.noError = o.lacksWebSocketHandlers()
	if err := rt.ws.add(ws, true); err != nil {
		ws.c.Drop()
		return nil, err
	}
	t.emit(effect{kind: effAccept, ws: ws})
	go ws.read()
	return ws, nil
}

// WebSockets lists the object's open connections carrying tag (all if tag is ""), in accept order,
// from the runtime's records: use it, not a list kept in memory, after an eviction (SEMANTICS R5).
// A connection the current turn closed is listed until the turn commits.
func (st *State) WebSockets(tag string) []*WebSocket {
	return st.o.rt.ws.list(st.o.ns, st.o.name, tag)
}

// SetWebSocketAutoResponse makes the runtime answer a text message equal to request with response
// on any of the object's connections, without creating or waking the object (SEMANTICS R3);
// WebSocket.AutoResponseTimestamp records when. The setting survives evictions, not a restart of
// the runtime: set it in the constructor. An empty request removes it.
func (st *State) SetWebSocketAutoResponse(request, response string) error {
	if len(request) > MaxAutoResponseLen || len(response) > MaxAutoResponseLen {
		return fmt.Errorf("%w: auto-response over %d bytes", ErrTooLarge, MaxAutoResponseLen)
	}
	var ar *autoResponse
	if request != "" {
		ar = &autoResponse{request: request, response: TextMessage(response)}
	}
	st.o.rt.ws.setAuto(st.o.ns, st.o.name, ar)
	return nil
}

// A WebSocket is an object's handle to one connection the runtime owns (hibernatable WebSockets,
// SEMANTICS R). Its methods are safe for concurrent use; Send and Close act in the turn their
// context marks, leaving with the group commit that holds its writes, and not at all if it fails.
// An object accepts a WebSocket in one of its turns, usually in Fetch (see Stub.ServeHTTP), with
// State.AcceptWebSocket; the runtime then owns the connection: its TCP socket, one reader
// goroutine, a writer goroutine while messages wait, a bounded send queue, its tags, attachment and
// auto-response time. The object holds only *WebSocket handles, valid while the connection is open,
// across evictions: a re-created object finds its connections again with State.WebSockets.
//
// Events reach the object as turns through the FIFO queue calls use (WebSocketMessageHandler,
// WebSocketCloseHandler, WebSocketErrorHandler), one at a time: one connection's in the order sent,
// different connections' in the order their readers queued them (R1). A reader does not wait for a
// message's turn before reading the next: up to 32 messages of one connection may be queued or
// committing at once (so consecutive messages share a group commit); past that the reader waits,
// so a flooding client is held back by TCP, not buffered. A message's turn that fails closes the
// connection with 1011 (the messages queued after it find it closed and are dropped).
//
// Hibernation: connections do not keep an object in memory: an object tied only by connections is
// evicted after Options.IdleTimeout, and the next event re-creates it (constructor, then handler:
// R5). Only two things prevent that (R6): a turn running or waiting inside State.Await (calls to
// other objects from a turn included), and calls queued for the object; timers and goroutines the
// object starts do not, nor survive eviction. The reader answers auto-responses without the object
// (R3); a close or error event without a handler does not wake it.
//
// The runtime answers Close frames (R9) and sends the Close* codes. A client that takes over 10 s
// to accept a write is dropped even before its queue is full. Browsers may open sockets only from
// the request's own host or an origin in Options.WebSocketOrigins. An idle connection, hibernated
// or not, costs one parked goroutine, a 1 KiB read buffer and the records, about 7.5 KiB in all
// (BenchmarkRoomHibernated); writers and their buffers exist only while messages wait.
type WebSocket struct {
	rt               *Runtime
	ns               *namespace
	name, id         string      // the owning object's
	c                wsTransport // *wsconn.Conn here, *remoteConn for one an edge holds (wsrelay.go)
	tags             []string
	noClose, noError bool          // the object has no WebSocketClose, WebSocketError handler
	autoAt           atomic.Int64  // unix ns of the last auto-response
	inflight         chan struct{} // one token per message whose turn is queued or committing

	group *wsGroup // group and slot are guarded by the hub's mu
	slot  int      // index in group.conns, -1 once unlisted

	mu     sync.Mutex // protects the fields below
	closed bool       // over: the attachment is gone
	attach []byte     // the attachment, as JSON
}

// Send queues m for the client's writer goroutine; it never blocks. It is output-gated by the turn
// ctx marks, whichever object's: m leaves once that turn's writes are durable, never if it fails.
// Outside a turn (or in an Await's fn) Send fails with ErrNotInTurn. Do not modify m.Data after
// Send. A client with Options.WebSocketSendQueue messages waiting is cut off with 1013 and the
// object receives WebSocketError with ErrSlowClient: a slow client never stalls the room.
func (ws *WebSocket) Send(ctx context.Context, m Message) error {
	t := turnOf(ctx)
	if t == nil {
		return ErrNotInTurn
	}
	if !ws.c.Open() {
		return ErrWebSocketClosed
	}
	t.emit(effect{kind: effSend, ws: ws, msg: m})
	return nil
}

// Close closes the connection with code (1000, or 3000 to 4999) and reason (at most 123 bytes),
// after the messages sent before it; the runtime then waits a moment for the client's Close frame.
// WebSocketClose is not called for it. Like Send, it acts in the turn ctx marks.
func (ws *WebSocket) Close(ctx context.Context, code int, reason string) error {
	t := turnOf(ctx)
	if t == nil {
		return ErrNotInTurn
	}
	if code != CloseNormal && (code < 3000 || code > 4999) {
		return fmt.Errorf("core: websocket close code %d: use 1000 or 3000 to 4999", code)
	}
	if len(reason) > 123 || !utf8.ValidString(reason) {
		return errors.New("core: websocket close reason must be valid UTF-8 of at most 123 bytes")
	}
	if !ws.c.Open() {
		return ErrWebSocketClosed
	}
	t.emit(effect{kind: effClose, ws: ws, end: &wsconn.End{Code: code, Reason: reason}})
	return nil
}

// Tags returns the tags the connection was accepted with.
func (ws *WebSocket) Tags() []string { return slices.Clone(ws.tags) }

// SerializeAttachment keeps v, as JSON of at most MaxAttachmentLen bytes, with the connection
// (SEMANTICS R4), across evictions of the object, until the connection closes. Keep larger data in
// storage, its key in the attachment. It takes effect at once, even if the turn fails.
func (ws *WebSocket) SerializeAttachment(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("core: websocket attachment: %w", err)
	}
	if len(b) > MaxAttachmentLen {
		return fmt.Errorf("%w: websocket attachment of %d bytes (limit %d); keep larger data in storage and its key in the attachment", ErrTooLarge, len(b), MaxAttachmentLen)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return ErrWebSocketClosed
	}
	ws.attach = b
	if rc, ok := ws.c.(*remoteConn); ok {
		rc.setAttachment(b) // the edge keeps a copy, to carry it to the next owner
	}
	return nil
}

// DeserializeAttachment decodes the attachment into v, which is left alone if there is none. It
// fails with ErrWebSocketClosed once the connection is closed.
func (ws *WebSocket) DeserializeAttachment(v any) error {
	b, err := ws.Attachment()
	if err != nil || b == nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Attachment returns a copy of the attachment's JSON, nil if there is none.
func (ws *WebSocket) Attachment() (json.RawMessage, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil, ErrWebSocketClosed
	}
	return bytes.Clone(ws.attach), nil
}

// AutoResponseTimestamp returns when the runtime last auto-responded here, or the zero time.
func (ws *WebSocket) AutoResponseTimestamp() time.Time {
	if ns := ws.autoAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// wsTransport is what a handle needs of its connection: wsconn's, or the relay's to another node.
type wsTransport interface {
	Open() bool
	Enqueue(f wsconn.Frame) bool
	StartClose(end *wsconn.End)
	Drop()
}

// slowCut records a WebSocket client cut off for falling behind.
func (ws *WebSocket) slowCut() {
	ws.ns.count(telemetry.SlowCut)
	ws.rt.log.Warn("a slow WebSocket client was cut off (1013)", "event", "websocket_slow_cut",
		"namespace", ws.ns.name, "name", ws.name, "queue", ws.rt.opts.WebSocketSendQueue)
}
