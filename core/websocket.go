package core

import (
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

	"github.com/durable-go/durable/core/internal/wsconn"
)

// Limits of the WebSocket API (those of the original runtime).
const (
	MaxAttachmentLen   = 16384 // bytes of an attachment, as JSON (SEMANTICS R4)
	MaxTags            = 10    // tags per connection
	MaxTagLen          = 256   // bytes in a tag
	MaxAutoResponseLen = 2048  // bytes in an auto-response request or response
)

// Close codes the runtime sends. An object closing a connection itself may
// use 1000 or a code from 3000 to 4999.
const (
	CloseNormal        = 1000 // a normal close
	CloseGoingAway     = 1001 // the runtime is shutting down (Runtime.Close)
	CloseNoStatus      = 1005 // reported to WebSocketClose: the peer's Close frame had no code
	CloseAbnormal      = 1006 // reported to WebSocketClose: the connection dropped without a Close frame
	CloseInvalidText   = 1007 // a text message that is not valid UTF-8
	CloseMessageTooBig = 1009 // a message over Options.WebSocketMaxMessage
	CloseInternalError = 1011 // a handler failed, or the turn that accepted the connection did
	CloseTryAgainLater = 1013 // the client fell behind its send queue, or the object's queue was full
)

// A Message is one WebSocket message: text (UTF-8) or binary.
type Message struct {
	Data   []byte
	Binary bool
}

// TextMessage returns a text message holding s.
func TextMessage(s string) Message { return Message{Data: []byte(s)} }

// BinaryMessage returns a binary message holding b.
func BinaryMessage(b []byte) Message { return Message{Data: b, Binary: true} }

// Text returns the message's data as a string.
func (m Message) Text() string { return string(m.Data) }

// WebSocketMessageHandler is implemented by objects that receive the
// messages of the WebSockets they accepted. Each message is delivered as a
// turn of its own, atomic and output-gated like a call. If the handler
// returns an error or panics, the turn is rolled back (its sends and closes
// are dropped), the error is logged, and the connection is closed with 1011.
type WebSocketMessageHandler interface {
	WebSocketMessage(ctx context.Context, ws *WebSocket, msg Message) error
}

// WebSocketCloseHandler is implemented by objects that want to know when a
// client ends its connection: it sent a Close frame (code and reason are
// its own; the runtime has answered the frame already, SEMANTICS R9), or the
// connection dropped (CloseAbnormal). The handle is no longer listed by
// State.WebSockets; its attachment can still be read during the handler and
// is gone after it. A close the object asked for itself is not reported,
// and an object that does not implement the handler is not woken for it.
type WebSocketCloseHandler interface {
	WebSocketClose(ctx context.Context, ws *WebSocket, code int, reason string) error
}

// WebSocketErrorHandler is implemented by objects that want to know when
// the runtime closed one of their connections because of an error: a
// message over the size limit (ErrTooLarge, closed with 1009), a text
// message that is not valid UTF-8 (ErrInvalidText, 1007), a client too
// slow to keep up (ErrSlowClient, 1013), or a protocol violation (1002).
// As for WebSocketClose, the attachment is readable during the handler.
type WebSocketErrorHandler interface {
	WebSocketError(ctx context.Context, ws *WebSocket, err error) error
}

// AcceptWebSocket upgrades the request to a WebSocket whose connection the
// runtime owns, and returns the object's handle to it. Call it from a turn
// (Fetch, run by Stub.ServeHTTP, or any call that was handed w and r). The
// tags (at most MaxTags of MaxTagLen bytes) select the connection in
// State.WebSockets.
//
// The upgrade happens at once, but the accept is part of the turn: if the
// turn fails, the connection is closed with 1011 and never listed again.
// Messages the client sends are delivered as turns queued behind this one.
// If the handshake fails (not an upgrade, a foreign Origin: see
// Options.WebSocketOrigins), the error response has been written to w and
// the error wraps ErrBadHandshake; return nil from Fetch to send it.
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
	rt := o.rt
	ws := &WebSocket{rt: rt, ns: o.ns, name: o.name, id: o.id, tags: slices.Clone(tags)}
	ws.c, err = wsconn.Upgrade(rt.ws.upgrader(rt), w, r, wsconn.Options{
		ReadLimit: rt.opts.WebSocketMaxMessage, Queue: rt.opts.WebSocketSendQueue,
		Slow: ErrSlowClient, BadText: ErrInvalidText, OnClose: func() { rt.ws.unlist(ws) },
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHandshake, err)
	}
	// An object with no handler for an event is not woken for it.
	_, noClose := o.inst.(WebSocketCloseHandler)
	_, noError := o.inst.(WebSocketErrorHandler)
	ws.noClose, ws.noError = !noClose && o.inst != nil, !noError && o.inst != nil
	if err := rt.ws.add(ws); err != nil {
		ws.c.Drop()
		return nil, err
	}
	t.emit(effect{kind: effAccept, ws: ws})
	go ws.read()
	return ws, nil
}

// WebSockets lists the object's open connections that carry tag, or all of
// them if tag is "", in the order they were accepted. The list is rebuilt
// from the runtime's records each time: use it, not a list kept in memory,
// after the object was evicted and re-created (SEMANTICS R5). A connection
// the current turn closed is still listed until the turn commits.
func (st *State) WebSockets(tag string) []*WebSocket {
	return st.o.rt.ws.list(st.o.ns, st.o.name, tag)
}

// SetWebSocketAutoResponse makes the runtime answer a text message equal to
// request with response on any of the object's connections, without
// creating or waking the object (SEMANTICS R3); WebSocket.AutoResponseTimestamp
// records when. The setting is kept by the runtime, not the object: it
// survives evictions of the object, but not a restart of the runtime, so
// set it in the constructor. An empty request removes it.
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

// A WebSocket is an object's handle to one connection the runtime owns
// (hibernatable WebSockets, SEMANTICS R). Its methods are safe for
// concurrent use; Send and Close act in the turn their context marks (see
// Send).
//
// An object accepts a WebSocket in one of its turns, usually in Fetch (see
// Stub.ServeHTTP), with State.AcceptWebSocket, and from then on the runtime
// owns the connection: its TCP socket, one reader goroutine, a writer
// goroutine while messages wait, a bounded send queue, its tags, its
// attachment and its auto-response time. The object holds only *WebSocket
// handles, which stay valid while the connection is open, across evictions
// of the object: an object re-created after an eviction finds its
// connections again with State.WebSockets.
//
// Events reach the object as turns, through the same FIFO queue as calls
// (WebSocketMessageHandler, WebSocketCloseHandler, WebSocketErrorHandler),
// so a room's messages are handled one at a time: those of one connection
// in the order they were sent, those of different connections in the order
// their reader goroutines queued them (R1). The reader waits for a
// message's turn before it reads the next one, so a client that floods a
// busy object is held back by TCP, not buffered in memory.
//
// Output gate: WebSocket.Send and WebSocket.Close called in a turn are
// held until the turn's writes are durable (they leave with the group
// commit that holds them) and dropped if the turn fails; an accept in a
// failed turn is undone (the client sees 1011).
//
// Hibernation: a connection does not keep its object in memory. An object
// whose only ties are connections is evicted after Options.IdleTimeout like
// any other; the next event re-creates it (constructor first, then the
// handler) (R5). In this runtime only two things prevent that (R6): a turn
// running or waiting inside State.Await (which covers calls to other
// objects made from a turn), and calls queued for the object. Timers and
// goroutines the object starts itself do not, and do not survive eviction
// either. Auto-responses (State.SetWebSocketAutoResponse) are answered by
// the reader without the object (R3), and a close or error event is not
// delivered (nor the object woken) if it has no handler for it.
//
// Close frames are answered by the runtime (R9). The close codes it sends:
//
//	1001 CloseGoingAway      Runtime.Close: every connection, on shutdown (R8)
//	1002                     the client broke the protocol
//	1007 CloseInvalidText    a text message that is not valid UTF-8 (never delivered)
//	1009 CloseMessageTooBig  a message over Options.WebSocketMaxMessage (1 MiB)
//	1011 CloseInternalError  the message handler failed; the accepting turn failed
//	1013 CloseTryAgainLater  the client fell Options.WebSocketSendQueue (256)
//	                         messages behind; or the object's queue was full
//
// A client that takes more than 10 s to accept a write is dropped even
// before its queue is full. Browsers may open sockets only from the
// request's own host or an origin in Options.WebSocketOrigins.
//
// Cost of an idle connection, hibernated or not: one parked goroutine, a
// 1 KiB read buffer and the records, about 7.5 KiB in all (bench
// BenchmarkRoomHibernated); writers and their buffers exist only while
// messages wait.
type WebSocket struct {
	rt   *Runtime
	ns   *namespace
	name string // the owning object's name
	id   string // and id
	c    *wsconn.Conn
	tags []string

	noClose, noError bool // the object has no WebSocketClose, WebSocketError handler

	autoAt atomic.Int64 // unix ns of the last auto-response

	// Guarded by the hub's mu.
	group *wsGroup
	slot  int // index in group.conns, -1 once unlisted

	mu     sync.Mutex // protects the fields below
	closed bool       // over: the attachment is gone
	attach []byte     // the attachment, as JSON
}

// Send queues m for the client. The runtime writes it from the
// connection's writer goroutine; Send never blocks.
//
// Send is output-gated by the turn ctx marks, whichever object's turn it
// is: the message leaves only after that turn's writes are durable, and
// not at all if the turn fails. Outside a turn (or inside an Await's fn)
// Send fails with ErrNotInTurn. Do not modify m.Data after Send. If too many messages wait for the
// client (Options.WebSocketSendQueue), it is cut off with 1013 and the
// object receives WebSocketError with ErrSlowClient: a slow client never
// stalls the room.
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

// SendText sends a text message.
func (ws *WebSocket) SendText(ctx context.Context, s string) error {
	return ws.Send(ctx, TextMessage(s))
}

// Close closes the connection with code (1000, or 3000 to 4999) and reason
// (at most 123 bytes). Messages sent before it are written first; the
// runtime then waits a moment for the client's Close frame. The object's
// WebSocketClose handler is not called for a close it made. Like Send,
// Close acts in the turn ctx marks: it leaves with that turn's commit.
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

// SerializeAttachment keeps v, as JSON of at most MaxAttachmentLen bytes,
// with the connection (SEMANTICS R4). The runtime keeps it, so it survives
// evictions of the object; it is gone once the connection is closed. Keep
// larger data in storage and only its key in the attachment. It takes
// effect at once, even if the turn later fails.
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
	return nil
}

// DeserializeAttachment decodes the attachment into v, which is left alone
// if there is none. It fails with ErrWebSocketClosed once the connection
// is closed.
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
	return bytesClone(ws.attach), nil
}

func bytesClone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// AutoResponseTimestamp returns when the runtime last answered the
// auto-response request on this connection, or the zero time.
func (ws *WebSocket) AutoResponseTimestamp() time.Time {
	if ns := ws.autoAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
