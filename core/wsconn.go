package core

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// The transport of the runtime's WebSockets: the upgrade, one reader and at
// most one writer goroutine per connection, the send queue and closing.
//
// Each connection has a reader goroutine for its whole life; it answers
// auto-responses itself and delivers every other message to the object as
// a turn, waiting for that turn before it reads the next message (so a
// client that floods a busy object is slowed down by TCP, not buffered).
// A writer goroutine runs only while messages wait: it takes everything
// queued, writes it with one system call, and exits when the queue is
// empty, so an idle connection costs one parked goroutine and its buffers.
// The reader owns the writer: before it returns it waits for it.
//
// Timing constants:
//   - wsWriteTimeout bounds each write to the socket: a client that reads
//     nothing for that long is dropped even if its queue is not full.
//   - closeGrace is how long a client has to answer a Close frame (and to
//     close its side) before the runtime drops the TCP connection.
const (
	wsReadBuffer   = 1024 // bytes of the reader's buffer; larger messages are read in several system calls
	wsWriteBuffer  = 4096 // bytes of a pooled write buffer, held only while a message is written
	wsWriteTimeout = 10 * time.Second
	closeGrace     = 3 * time.Second
	corkMax        = 64 << 10 // bytes of frames gathered into one write to the socket
)

var (
	wsWritePool sync.Pool // gorilla's write buffers, shared by all connections
	corkPool    = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
)

func (h *wsHub) upgrader(rt *Runtime) *websocket.Upgrader {
	h.once.Do(func() {
		h.up = &websocket.Upgrader{
			HandshakeTimeout: wsWriteTimeout,
			ReadBufferSize:   wsReadBuffer,
			WriteBufferSize:  wsWriteBuffer,
			WriteBufferPool:  &wsWritePool,
			CheckOrigin:      rt.checkOrigin,
		}
	})
	return h.up
}

// checkOrigin lets a request open a WebSocket if it has no Origin header
// (not a browser), if its Origin's host is the request's own host, or if
// its Origin is listed in Options.WebSocketOrigins ("*" allows any).
func (rt *Runtime) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, allowed := range rt.opts.WebSocketOrigins {
		if allowed == "*" || strings.EqualFold(strings.TrimSuffix(allowed, "/"), origin) {
			return true
		}
	}
	return false
}

// wsHijack hands gorilla the hijacked connection wrapped in a corkConn.
type wsHijack struct {
	http.ResponseWriter
	conn *corkConn
}

func (h *wsHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("core: the response writer cannot be hijacked (HTTP/1.1 is needed for WebSockets)")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &corkConn{Conn: nc}
	return h.conn, brw, nil
}

// corkConn is the connection under gorilla. The writer goroutine writes
// data frames itself, a whole batch of them with one system call
// (writeFrames); gorilla writes only the handshake and control frames
// (pong, close) through Write. Every write gets a deadline of its own.
type corkConn struct {
	net.Conn
	limit atomic.Int64 // unix ns no write may outlast once a close is under way (0: none)

	mu        sync.Mutex // serializes writes; protects closeSent
	closeSent bool       // a Close frame has gone out: no data frame may follow
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) > 0 && p[0] == 0x80|websocket.CloseMessage { // FIN + close: gorilla's Close frame
		c.closeSent = true
	}
	return c.writeLocked(p)
}

// SetWriteDeadline is ignored: each write to the socket gets its own
// deadline (wsWriteTimeout, or sooner once a close is under way).
func (c *corkConn) SetWriteDeadline(time.Time) error { return nil }

func (c *corkConn) deadlineLocked() {
	d := time.Now().Add(wsWriteTimeout)
	c.Conn.SetWriteDeadline(d)
	if l := c.limit.Load(); l != 0 && l < d.UnixNano() {
		c.Conn.SetWriteDeadline(time.Unix(0, l))
	}
}

func (c *corkConn) writeLocked(p []byte) (int, error) {
	c.deadlineLocked()
	return c.Conn.Write(p)
}

// writeFrames writes batch as WebSocket data frames (a server's frames are
// not masked), gathering up to corkMax bytes per system call.
func (c *corkConn) writeFrames(batch []Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeSent {
		return websocket.ErrCloseSent
	}
	bp := corkPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 2*corkMax {
			*bp = (*bp)[:0]
			corkPool.Put(bp)
		}
	}()
	buf := *bp
	for _, m := range batch {
		var hdr [10]byte
		h := frameHeader(&hdr, m)
		if len(buf)+len(h)+len(m.Data) > corkMax && len(buf) > 0 {
			if _, err := c.writeLocked(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		if len(h)+len(m.Data) > corkMax { // too large to copy: one writev
			c.deadlineLocked()
			bufs := net.Buffers{h, m.Data}
			if _, err := bufs.WriteTo(c.Conn); err != nil {
				return err
			}
			continue
		}
		buf = append(buf, h...)
		buf = append(buf, m.Data...)
	}
	*bp = buf
	if len(buf) == 0 {
		return nil
	}
	_, err := c.writeLocked(buf)
	return err
}

// frameHeader fills hdr with the header of m's frame and returns it.
func frameHeader(hdr *[10]byte, m Message) []byte {
	hdr[0] = 0x80 | websocket.TextMessage // FIN
	if m.Binary {
		hdr[0] = 0x80 | websocket.BinaryMessage
	}
	switch n := len(m.Data); {
	case n < 126:
		hdr[1] = byte(n)
		return hdr[:2]
	case n <= 0xffff:
		hdr[1] = 126
		binary.BigEndian.PutUint16(hdr[2:], uint16(n))
		return hdr[:4]
	default:
		hdr[1] = 127
		binary.BigEndian.PutUint64(hdr[2:], uint64(n))
		return hdr[:10]
	}
}

// limitDeadline makes every read and write end by t at the latest. It does
// not wait for a write in progress, which it cuts short too.
func (c *corkConn) limitDeadline(t time.Time) {
	n := t.UnixNano()
	for {
		old := c.limit.Load()
		if old != 0 && old <= n {
			return
		}
		if c.limit.CompareAndSwap(old, n) {
			break
		}
	}
	c.Conn.SetWriteDeadline(t)
	c.Conn.SetReadDeadline(t)
}

// finish ends the TCP connection. With linger (the client is alive and
// has said goodbye), it first sends FIN and reads until the client closes
// its side too, for at most closeGrace, so that the Close frame is not
// lost to a reset.
func (c *corkConn) finish(linger bool) {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && linger && cw.CloseWrite() == nil {
		c.Conn.SetReadDeadline(time.Now().Add(closeGrace))
		var buf [512]byte
		for {
			if _, err := c.Conn.Read(buf[:]); err != nil {
				break
			}
		}
	}
	c.Conn.Close()
}

// enqueue adds m to the send queue and makes sure a writer runs. A client
// with a full queue is cut off (SEMANTICS R: slow clients never stall the room).
func (ws *WebSocket) enqueue(m Message) error {
	ws.mu.Lock()
	if ws.state != wsOpen || ws.broken {
		ws.mu.Unlock()
		return ErrWebSocketClosed
	}
	if len(ws.queue) >= ws.rt.opts.WebSocketSendQueue {
		ws.mu.Unlock()
		ws.startClose(&wsEnd{code: CloseTryAgainLater, reason: "too slow: send queue full", err: ErrSlowClient, notify: true, drop: true})
		return ErrSlowClient
	}
	if ws.queue == nil {
		ws.queue = getQueue()
	}
	ws.queue = append(ws.queue, m)
	ws.kickLocked()
	ws.mu.Unlock()
	return nil
}

func (ws *WebSocket) kickLocked() {
	if !ws.writing {
		ws.writing = true
		ws.writers.Add(1)
		go ws.write()
	}
}

// write is the writer goroutine: it writes what is queued, batch by batch,
// then the Close frame if one is owed, and returns when nothing is left.
func (ws *WebSocket) write() {
	defer ws.writers.Done()
	for {
		ws.mu.Lock()
		batch := ws.queue
		ws.queue = nil
		var closeMsg []byte
		if len(batch) == 0 {
			closeMsg, ws.closeMsg = ws.closeMsg, nil
			if closeMsg == nil {
				ws.writing = false
				ws.mu.Unlock()
				return
			}
		}
		ws.mu.Unlock()
		err := ws.writeBatch(batch, closeMsg)
		putQueue(batch)
		if err != nil {
			ws.mu.Lock()
			ws.broken = true
			putQueue(ws.queue)
			ws.queue, ws.closeMsg, ws.writing = nil, nil, false
			ws.mu.Unlock()
			ws.raw.Conn.Close() // the reader sees it and finishes
			return
		}
	}
}

func (ws *WebSocket) writeBatch(batch []Message, closeMsg []byte) error {
	if closeMsg != nil {
		err := ws.conn.WriteControl(websocket.CloseMessage, closeMsg, time.Now().Add(closeGrace))
		if err == websocket.ErrCloseSent { // gorilla has answered the client's Close already
			return nil
		}
		return err
	}
	return ws.raw.writeFrames(batch)
}

// Send queues are pooled: an idle connection keeps none.
var queuePool sync.Pool

func getQueue() []Message {
	if q, ok := queuePool.Get().(*[]Message); ok {
		return (*q)[:0]
	}
	return make([]Message, 0, 8)
}

func putQueue(q []Message) {
	if q == nil || cap(q) > 4096 {
		return
	}
	clear(q)
	q = q[:0]
	queuePool.Put(&q)
}

// startClose begins a close from this side: no more sends, the Close frame
// after the messages queued (or instead of them, for a client too slow for
// them), and closeGrace for the client to answer.
func (ws *WebSocket) startClose(end *wsEnd) {
	ws.mu.Lock()
	if ws.state != wsOpen {
		ws.mu.Unlock()
		return
	}
	ws.state, ws.end = wsClosing, end
	ws.shut.Store(true)
	if end.drop {
		putQueue(ws.queue)
		ws.queue = nil
	}
	if !ws.broken {
		ws.closeMsg = websocket.FormatCloseMessage(end.code, end.reason)
		ws.kickLocked()
	}
	ws.mu.Unlock()
	ws.rt.ws.unlist(ws)
	ws.raw.limitDeadline(time.Now().Add(closeGrace))
}

// read is the reader goroutine, owned by the hub.
func (ws *WebSocket) read() {
	defer ws.rt.ws.wg.Done()
	for {
		typ, data, err := ws.conn.ReadMessage()
		if err != nil {
			ws.finish(err)
			return
		}
		if !ws.open() {
			continue // closing: only the client's Close frame matters now
		}
		if typ == websocket.TextMessage {
			if ar := ws.group.auto.Load(); ar != nil && string(data) == ar.request {
				ws.autoAt.Store(ws.rt.now().UnixNano())
				ws.enqueue(ar.response)
				continue
			}
		}
		ws.onMessage(Message{Data: data, Binary: typ == websocket.BinaryMessage})
	}
}

func (ws *WebSocket) onMessage(m Message) {
	err := ws.deliver(func(ctx context.Context, inst any) error {
		if !ws.open() {
			return nil // closed while the message waited (its accept was rolled back, say)
		}
		h, ok := inst.(WebSocketMessageHandler)
		if !ok {
			return nil
		}
		return h.WebSocketMessage(ctx, ws, m)
	})
	switch {
	case err == nil || errors.Is(err, ErrClosed):
	case errors.Is(err, ErrOverloaded):
		ws.startClose(&wsEnd{code: CloseTryAgainLater, reason: "object overloaded"})
	default:
		ws.rt.log.Error("websocket message handler failed", "event", "websocket_handler_failed",
			"namespace", ws.ns.name, "name", ws.name, "error", err)
		ws.startClose(&wsEnd{code: CloseInternalError, reason: "internal error"})
	}
}

// deliver runs fn as a turn of the owning object, re-creating it if it
// was evicted, as Stub.call does.
func (ws *WebSocket) deliver(fn func(context.Context, any) error) error {
	rt := ws.rt
	if err := rt.enter(); err != nil {
		return err
	}
	defer rt.leave()
	return ws.ns.with(ws.name, ws.id, placement{}, func(o *object) error { return o.run(rt.base, fn) })
}

// finish ends the connection once its reader has stopped: it lets the
// writer finish, ends the TCP connection, tells the object why (unless the
// object closed it itself) and drops the attachment.
func (ws *WebSocket) finish(rerr error) {
	ws.mu.Lock()
	peer := ws.state == wsOpen // the end did not start on this side
	if peer {
		ws.state = wsClosing
		ws.shut.Store(true)
		putQueue(ws.queue)
		ws.queue = nil
	}
	end := ws.end
	ws.mu.Unlock()
	if peer {
		ws.rt.ws.unlist(ws)
	}
	ws.raw.limitDeadline(time.Now().Add(closeGrace))
	ws.writers.Wait()

	var event func(context.Context, any) error
	linger := true
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(rerr, &ce): // the client's Close frame, answered already; or 1006 for a drop
		linger = ce.Code != CloseAbnormal
		if peer && !ws.noClose {
			event = ws.closeEvent(ce.Code, ce.Text)
		}
	case errors.As(rerr, &ne) || errors.Is(rerr, net.ErrClosed):
		linger = false
		if peer && !ws.noClose {
			event = ws.closeEvent(CloseAbnormal, "")
		}
	case errors.Is(rerr, websocket.ErrReadLimit): // gorilla has sent 1009
		if peer && !ws.noError {
			event = ws.errorEvent(fmt.Errorf("%w: websocket message over the limit of %d bytes; closed with 1009", ErrTooLarge, ws.rt.opts.WebSocketMaxMessage))
		}
	default: // a protocol error: gorilla has sent 1002
		if peer && !ws.noError {
			event = ws.errorEvent(fmt.Errorf("core: websocket protocol error, closed with 1002: %w", rerr))
		}
	}
	if !peer && end.notify && !ws.noError {
		event = ws.errorEvent(end.err)
	}
	ws.raw.finish(linger)
	if event != nil {
		err := ws.deliver(func(ctx context.Context, inst any) error {
			defer ws.retire() // the attachment is readable during the handler, gone after it
			return event(ctx, inst)
		})
		if err != nil && !errors.Is(err, ErrClosed) {
			ws.rt.log.Error("websocket close handler failed", "event", "websocket_handler_failed",
				"namespace", ws.ns.name, "name", ws.name, "error", err)
		}
	}
	ws.retire()
}

func (ws *WebSocket) closeEvent(code int, reason string) func(context.Context, any) error {
	return func(ctx context.Context, inst any) error {
		if h, ok := inst.(WebSocketCloseHandler); ok {
			return h.WebSocketClose(ctx, ws, code, reason)
		}
		return nil
	}
}

func (ws *WebSocket) errorEvent(err error) func(context.Context, any) error {
	return func(ctx context.Context, inst any) error {
		if h, ok := inst.(WebSocketErrorHandler); ok {
			return h.WebSocketError(ctx, ws, err)
		}
		return nil
	}
}

// retire marks the connection closed and drops its attachment.
func (ws *WebSocket) retire() {
	ws.mu.Lock()
	ws.state = wsClosed
	ws.attach = nil
	ws.mu.Unlock()
}
