// Package wsconn is the transport of a server's WebSocket connection: the upgrade, one reader and
// at most one writer goroutine per connection, a bounded send queue, and closing. It knows nothing
// of the connection's owner: the reader hands each message to a function and reports how it ended.
// The reader runs for the connection's whole life and waits for each message's handling before it
// reads the next (a client that floods a busy owner is slowed down by TCP, not buffered). A writer
// goroutine runs only while frames wait, writing everything queued with one system call, so an idle
// connection costs one parked goroutine and its buffers; Serve waits for it.
package wsconn

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// WriteTimeout bounds each socket write: a client reading nothing that long is dropped, full queue
// or not. CloseGrace is how long a client has to answer a Close frame and close its side.
const (
	ReadBuffer   = 1024 // bytes of the reader's buffer; larger messages are read in several system calls
	WriteBuffer  = 4096 // bytes of a pooled write buffer, held only while a message is written
	WriteTimeout = 10 * time.Second
	CloseGrace   = 3 * time.Second
	corkMax      = 64 << 10 // bytes of frames gathered into one write to the socket
)

var (
	writePool sync.Pool // gorilla's write buffers, shared by all connections
	corkPool  = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
	queuePool sync.Pool // send queues: an idle connection keeps none
)

// NewUpgrader returns the upgrader for Upgrade, with checkOrigin.
func NewUpgrader(checkOrigin func(*http.Request) bool) *websocket.Upgrader {
	return &websocket.Upgrader{
		HandshakeTimeout: WriteTimeout,
		ReadBufferSize:   ReadBuffer,
		WriteBufferSize:  WriteBuffer,
		WriteBufferPool:  &writePool,
		CheckOrigin:      checkOrigin,
	}
}

// Frame is one message: text (UTF-8) or binary.
type Frame struct {
	Data   []byte
	Binary bool
}

// End says why and how a connection is closed from this side.
type End struct {
	Code   int
	Reason string
	Err    error // reported in Ending when Notify is set
	Notify bool
	Drop   bool // drop the frames still queued (the client is too slow for them)
}

// Ending is how a connection ended, as its reader saw it.
type Ending struct {
	Peer   bool   // the end did not start on this side
	Code   int    // the client's close code (1005 none, 1006 dropped); 0 with Err
	Reason string // the client's close reason
	Err    error  // a protocol error, a message over the limit, or the End's Err with Notify
}

// Options configure a connection.
type Options struct {
	ReadLimit int64  // the largest message accepted (gorilla closes with 1009 above it)
	Queue     int    // the frames that may wait for the client
	Slow      error  // the error reported when the client falls Queue frames behind
	BadText   error  // the error reported for a text message that is not UTF-8 (closed with 1007)
	OnClose   func() // called once, when a close begins
}

// Conn is one connection. Its methods are safe for concurrent use.
type Conn struct {
	opts Options
	ws   *websocket.Conn
	raw  *corkConn
	shut atomic.Bool // closing has begun

	mu       sync.Mutex // protects the fields below
	end      *End       // why this side closes it
	queue    []Frame    // waiting for the writer, at most opts.Queue
	writing  bool       // a writer goroutine runs
	closeMsg []byte     // a Close frame to write once the queue is empty
	broken   bool       // a write failed: the connection is being torn down
	writers  sync.WaitGroup
}

// Upgrade upgrades the request; the handshake's error response, if any, has been written to w.
func Upgrade(up *websocket.Upgrader, w http.ResponseWriter, r *http.Request, opts Options) (*Conn, error) {
	hw := &hijacker{ResponseWriter: w}
	ws, err := up.Upgrade(hw, r, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(opts.ReadLimit)
	return &Conn{opts: opts, ws: ws, raw: hw.conn}, nil
}

// Drop closes the TCP connection of a connection never served.
func (c *Conn) Drop() { c.ws.Close() }

// Open reports whether no close has begun.
func (c *Conn) Open() bool { return !c.shut.Load() }

// hijacker hands gorilla the hijacked connection wrapped in a corkConn.
type hijacker struct {
	http.ResponseWriter
	conn *corkConn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot be hijacked (HTTP/1.1 is needed for WebSockets)")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &corkConn{Conn: nc}
	return h.conn, brw, nil
}

// corkConn is the connection under gorilla. The writer goroutine writes data frames itself, a batch
// per system call (writeFrames); gorilla writes only the handshake and control frames (pong, close)
// through Write. Every write gets a deadline of its own.
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

// SetWriteDeadline is ignored: each socket write has its own (WriteTimeout, sooner once closing).
func (c *corkConn) SetWriteDeadline(time.Time) error { return nil }

func (c *corkConn) deadlineLocked() {
	d := time.Now().Add(WriteTimeout)
	if l := c.limit.Load(); l != 0 && l < d.UnixNano() {
		d = time.Unix(0, l)
	}
	c.Conn.SetWriteDeadline(d)
}

func (c *corkConn) writeLocked(p []byte) (int, error) {
	c.deadlineLocked()
	return c.Conn.Write(p)
}

// writeFrames writes batch as (unmasked) data frames, gathering up to corkMax bytes per write.
func (c *corkConn) writeFrames(batch []Frame) error {
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
func frameHeader(hdr *[10]byte, m Frame) []byte {
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

// limitDeadline makes every read and write end by t at the latest, cutting short one in progress.
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

// finish ends the TCP connection. With linger (the client is alive and said goodbye) it sends FIN
// and reads until the client closes too (at most CloseGrace), so no reset loses the Close frame.
func (c *corkConn) finish(linger bool) {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && linger && cw.CloseWrite() == nil {
		c.Conn.SetReadDeadline(time.Now().Add(CloseGrace))
		var buf [512]byte
		for {
			if _, err := c.Conn.Read(buf[:]); err != nil {
				break
			}
		}
	}
	c.Conn.Close()
}

// Enqueue adds f to the send queue and makes sure a writer runs. A client with a full queue is cut
// off with 1013 (slow clients never stall their owner). It reports whether f was queued.
func (c *Conn) Enqueue(f Frame) bool {
	c.mu.Lock()
	if c.shut.Load() || c.broken {
		c.mu.Unlock()
		return false
	}
	if len(c.queue) >= c.opts.Queue {
		c.mu.Unlock()
		c.StartClose(&End{Code: websocket.CloseTryAgainLater, Reason: "too slow: send queue full", Err: c.opts.Slow, Notify: true, Drop: true})
		return false
	}
	if c.queue == nil {
		c.queue = getQueue()
	}
	c.queue = append(c.queue, f)
	c.kickLocked()
	c.mu.Unlock()
	return true
}

func (c *Conn) kickLocked() {
	if !c.writing {
		c.writing = true
		c.writers.Add(1)
		go c.write()
	}
}

// write is the writer goroutine: it writes the queue batch by batch, then any Close frame owed.
func (c *Conn) write() {
	defer c.writers.Done()
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		var closeMsg []byte
		if len(batch) == 0 {
			closeMsg, c.closeMsg = c.closeMsg, nil
			if closeMsg == nil {
				c.writing = false
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		var err error
		if closeMsg != nil {
			err = c.ws.WriteControl(websocket.CloseMessage, closeMsg, time.Now().Add(CloseGrace))
			if err == websocket.ErrCloseSent { // gorilla has answered the client's Close already
				err = nil
			}
		} else {
			err = c.raw.writeFrames(batch)
		}
		putQueue(batch)
		if err != nil {
			c.mu.Lock()
			c.broken = true
			putQueue(c.queue)
			c.queue, c.closeMsg, c.writing = nil, nil, false
			c.mu.Unlock()
			c.raw.Conn.Close() // the reader sees it and finishes
			return
		}
	}
}

func getQueue() []Frame {
	if q, ok := queuePool.Get().(*[]Frame); ok {
		return (*q)[:0]
	}
	return make([]Frame, 0, 8)
}

func putQueue(q []Frame) {
	if q == nil || cap(q) > 4096 {
		return
	}
	clear(q)
	q = q[:0]
	queuePool.Put(&q)
}

// StartClose begins a close from this side: no more sends, the Close frame after the frames queued
// (or instead of them, with Drop), and CloseGrace for the client to answer.
func (c *Conn) StartClose(end *End) {
	c.mu.Lock()
	if c.shut.Load() {
		c.mu.Unlock()
		return
	}
	c.end = end
	c.shut.Store(true)
	if end.Drop {
		putQueue(c.queue)
		c.queue = nil
	}
	if !c.broken {
		c.closeMsg = websocket.FormatCloseMessage(end.Code, end.Reason)
		c.kickLocked()
	}
	c.mu.Unlock()
	c.opts.OnClose()
	c.raw.limitDeadline(time.Now().Add(CloseGrace))
}

// Serve is the reader: until the connection ends it hands each message to onMessage, which returns
// once it is dealt with; then it lets the writer finish, ends the TCP connection and says how.
func (c *Conn) Serve(onMessage func(Frame)) Ending {
	for {
		typ, data, err := c.ws.ReadMessage()
		if err != nil {
			return c.finish(err)
		}
		switch {
		case !c.Open(): // closing: only the client's Close frame matters now
		case typ == websocket.TextMessage && !utf8.Valid(data):
			c.StartClose(&End{Code: websocket.CloseInvalidFramePayloadData, Reason: "text message is not valid UTF-8", Err: c.opts.BadText, Notify: true})
		default:
			onMessage(Frame{Data: data, Binary: typ == websocket.BinaryMessage})
		}
	}
}

func (c *Conn) finish(rerr error) Ending {
	c.mu.Lock()
	e := Ending{Peer: !c.shut.Load()} // the end did not start on this side
	if e.Peer {
		c.shut.Store(true)
		putQueue(c.queue)
		c.queue = nil
	}
	end := c.end
	c.mu.Unlock()
	if e.Peer {
		c.opts.OnClose()
	}
	c.raw.limitDeadline(time.Now().Add(CloseGrace))
	c.writers.Wait()
	linger := true
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(rerr, &ce): // the client's Close frame, answered already; or 1006 for a drop
		linger = ce.Code != websocket.CloseAbnormalClosure
		e.Code, e.Reason = ce.Code, ce.Text
	case errors.As(rerr, &ne) || errors.Is(rerr, net.ErrClosed):
		linger = false
		e.Code = websocket.CloseAbnormalClosure
	default: // over the read limit (gorilla has sent 1009), or a protocol error (1002)
		e.Err = rerr
	}
	if !e.Peer {
		e.Code, e.Reason, e.Err = 0, "", nil
		if end.Notify {
			e.Err = end.Err
		}
	}
	c.raw.finish(linger)
	return e
}
