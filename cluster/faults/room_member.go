package faults

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/patterns/room"
)

// member is a WebSocket client of the room that RunRoomFailover drives: connected to its own node
// (its home) while that runs, to another while it does not, resuming each time from the last offset
// it received, as room.Follow does; it sends a numbered message every so often, and records what it
// received, its messages acknowledged (received back, with their offsets) and how each of its
// connections ended.
type member struct {
	f    *roomFailover
	name string
	home int

	quiet atomic.Bool // no more messages are sent
	wmu   sync.Mutex  // one writer at a time

	mu      sync.Mutex // protects the fields below
	conn    *websocket.Conn
	at      int       // the node of conn; -1 when not connected
	connAt  time.Time // when conn was made
	closing bool      // the member closes conn itself
	last    int64     // the last offset received; -1 before the first join
	joined  int64     // the offset the member first joined at
	got     []delivery
	n       int                  // messages sent
	sent    map[string]time.Time // message -> when it was sent
	acks    map[string]ack       // message -> its offset and when it came back
	order   []ack                // the acknowledgements in the order they came
	ends    []memberEnd
	skips   int    // live messages that skipped offsets, after which the member resumed
	gap     string // the room said its history no longer reaches back to the member's offset
}

type delivery struct {
	offset int64
	data   string
}

type ack struct {
	offset   int64
	sent, at time.Time
}

// memberEnd is how one connection of a member ended.
type memberEnd struct {
	node     int
	at       time.Time
	why      string
	client   bool // the member closed it itself (to move home, to resume after a skip, at the end)
	edgeDown bool // its node had been killed
}

// run connects, reads and reconnects until ctx ends or the room says the member's offset is gone.
func (m *member) run(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		node := m.pick()
		u, _ := url.Parse(m.f.url(node))
		q := url.Values{"name": {m.name}}
		m.mu.Lock()
		if m.last >= 0 {
			q.Set("since", strconv.FormatInt(m.last, 10))
		}
		m.mu.Unlock()
		u.RawQuery = q.Encode()
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, _, err := websocket.DefaultDialer.DialContext(dctx, u.String(), nil)
		cancel()
		if err != nil { // the node is down, or the room has no owner yet (503): try again
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 100 * time.Millisecond
		m.mu.Lock()
		m.conn, m.at, m.connAt, m.closing = c, node, time.Now(), false
		m.mu.Unlock()
		why := m.read(c)
		m.mu.Lock()
		m.ends = append(m.ends, memberEnd{node: node, at: time.Now(), why: why, client: m.closing || ctx.Err() != nil, edgeDown: m.f.isDown(node)})
		m.conn, m.at = nil, -1
		gap := m.gap != ""
		m.mu.Unlock()
		c.Close()
		if gap {
			return
		}
	}
}

// pick returns the node to connect to: the member's own, or, while it is down, the next one up.
func (m *member) pick() int {
	n := len(m.f.names)
	for i := range n {
		if node := (m.home + i) % n; !m.f.isDown(node) {
			return node
		}
	}
	return m.home
}

// read reads c until it ends, and says why it did.
func (m *member) read(c *websocket.Conn) string {
	for {
		typ, frame, err := c.ReadMessage()
		if err != nil {
			return err.Error()
		}
		if n, ok := bytes.CutPrefix(frame, []byte("!live ")); ok {
			off, err := strconv.ParseInt(string(n), 10, 64)
			m.mu.Lock()
			if err == nil && m.last < 0 {
				m.last, m.joined = off, off
			}
			m.mu.Unlock()
			continue
		}
		if bytes.HasPrefix(frame, []byte("!gap ")) {
			m.mu.Lock()
			m.gap, m.closing = string(frame), true
			m.mu.Unlock()
			return "history gap"
		}
		if typ == websocket.TextMessage && string(frame) == room.Pong {
			continue
		}
		d, ok, err := room.ParseDelivery(frame, typ == websocket.BinaryMessage)
		if err != nil {
			return err.Error()
		}
		if !ok {
			continue
		}
		m.mu.Lock()
		switch {
		case m.last < 0 || d.Offset <= m.last:
			// before the join's "!live", or seen before a reconnect
		case d.Offset > m.last+1:
			// This connection missed messages: resume from the last offset, as room.Follow does.
			m.skips++
			m.closing = true
			m.mu.Unlock()
			return fmt.Sprintf("offset %d after %d: resuming", d.Offset, m.last)
		default:
			m.got = append(m.got, delivery{offset: d.Offset, data: string(d.Data)})
			m.last = d.Offset
			if strings.Contains(string(d.From), `"name":"`+m.name+`"`) {
				a := ack{offset: d.Offset, sent: m.sent[string(d.Data)], at: time.Now()}
				m.acks[string(d.Data)] = a
				m.order = append(m.order, a)
			}
		}
		m.mu.Unlock()
	}
}

// send sends a numbered message every while connected, and "ping" every 20 s (the room closes a
// member that does not ping within its StaleAfter), until ctx ends.
func (m *member) send(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastPing := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		c := m.conn
		if c == nil {
			m.mu.Unlock()
			continue
		}
		msg := room.Ping
		if time.Since(lastPing) > 20*time.Second {
			lastPing = time.Now()
		} else if m.quiet.Load() {
			m.mu.Unlock()
			continue
		} else {
			m.n++
			msg = m.name + "-" + strconv.Itoa(m.n)
			m.sent[msg] = time.Now()
		}
		m.mu.Unlock()
		m.wmu.Lock()
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.WriteMessage(websocket.TextMessage, []byte(msg)) // a failure ends the connection's read too
		m.wmu.Unlock()
	}
}

// connectedAt returns the node the member is connected to, -1 if none.
func (m *member) connectedAt() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at
}

// connectedSince returns when the member's connection was made, if it is connected by one made at
// or after t.
func (m *member) connectedSince(t time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil || m.connAt.Before(t) {
		return time.Time{}, false
	}
	return m.connAt, true
}

// goHome closes the member's connection if it is at another node than its own and its own is up:
// it reconnects there.
func (m *member) goHome() {
	if m.f.isDown(m.home) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil && m.at != m.home {
		m.closing = true
		m.conn.Close()
	}
}

// hangUp closes the member's connection for good (the run ends).
func (m *member) hangUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.closing = true
		m.conn.Close()
	}
}

// ackedSince reports whether a message the member sent at or after t was acknowledged.
func (m *member) ackedSince(t time.Time) bool {
	_, ok := m.firstAck(t)
	return ok
}

// firstAck returns when the first of the member's messages sent at or after t was acknowledged.
func (m *member) firstAck(t time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first time.Time
	for i := len(m.order) - 1; i >= 0 && !m.order[i].at.Before(t); i-- { // sent at or after t: acknowledged after t
		if !m.order[i].sent.Before(t) {
			first = m.order[i].at
		}
	}
	return first, !first.IsZero()
}
