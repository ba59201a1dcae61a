package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core/internal/telemetry"
	"github.com/durable-go/durable/core/internal/wsconn"
)

// wsHub is the runtime's register of connections by owning object, whose events it delivers as
// turns (wsconn is the transport). Its zero value is ready to use. It owns every connection's
// goroutines: close closes them with 1001 and waits.
type wsHub struct {
	once sync.Once
	up   *websocket.Upgrader

	mu     sync.Mutex // protects groups, closed and every group's conns
	groups map[wsKey]*wsGroup
	closed bool
	wg     sync.WaitGroup // reader goroutines (each waits for its writer)
	relay  *wsRelay       // cluster mode with relaying: sockets held at other nodes (wsrelay.go)
}

type wsKey struct {
	ns   *namespace
	name string
}

// wsGroup is one object's connections.
type wsGroup struct {
	key   wsKey
	conns []*WebSocket // in accept order; nil where one was unlisted
	live  int
	auto  atomic.Pointer[autoResponse]
}

type autoResponse struct {
	request  string
	response Message
}

func (h *wsHub) groupLocked(k wsKey, create bool) *wsGroup {
	g := h.groups[k]
	if g == nil && create {
		if h.groups == nil {
			h.groups = make(map[wsKey]*wsGroup)
		}
		g = &wsGroup{key: k}
		h.groups[k] = g
	}
	return g
}

// add lists ws; reader says a reader goroutine of the hub's serves it (not so for one an edge holds).
func (h *wsHub) add(ws *WebSocket, reader bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	g := h.groupLocked(wsKey{ws.ns, ws.name}, true)
	ws.group, ws.slot = g, len(g.conns)
	g.conns = append(g.conns, ws)
	g.live++
	if reader {
		h.wg.Add(1) // for ws.read
	}
	return nil
}

// inOrder sorts wss, connections of one object, in the order its list holds them (the order
// WebSockets returns); those unlisted meanwhile go last.
func (h *wsHub) inOrder(wss []*WebSocket) []*WebSocket {
	h.mu.Lock()
	defer h.mu.Unlock()
	slices.SortStableFunc(wss, func(a, b *WebSocket) int {
		return cmp.Compare(uint(a.slot), uint(b.slot)) // -1 (unlisted) as the largest
	})
	return wss
}

// unlist removes ws from its object's list.
func (h *wsHub) unlist(ws *WebSocket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := ws.group
	if ws.slot < 0 {
		return
	}
	g.conns[ws.slot] = nil
	ws.slot = -1
	g.live--
	switch {
	case g.live == 0:
		g.conns = nil
		if g.auto.Load() == nil && h.groups[g.key] == g {
			delete(h.groups, g.key)
		}
	case len(g.conns) > 2*g.live+16: // compact
		n := 0
		for _, c := range g.conns {
			if c != nil {
				c.slot = n
				g.conns[n] = c
				n++
			}
		}
		clear(g.conns[n:])
		g.conns = g.conns[:n]
	}
}

func (h *wsHub) list(ns *namespace, name, tag string) []*WebSocket {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groupLocked(wsKey{ns, name}, false)
	if g == nil || g.live == 0 {
		return nil
	}
	out := make([]*WebSocket, 0, g.live)
	for _, ws := range g.conns {
		if ws != nil && (tag == "" || slices.Contains(ws.tags, tag)) {
			out = append(out, ws)
		}
	}
	return out
}

func (h *wsHub) setAuto(ns *namespace, name string, ar *autoResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groupLocked(wsKey{ns, name}, ar != nil)
	if g == nil {
		return
	}
	g.auto.Store(ar)
	if ar == nil && g.live == 0 {
		delete(h.groups, g.key)
	}
}

// closeOwn closes with 1001 every connection whose client is this node's and whose object this
// node owns, and lists no new one. The handles of other nodes' connections stay listed, and the
// relay runs, until closeRelay: a shard handed over as the runtime drains hands its handles to the
// next owner (wshandoff.go). Runtime.Shutdown calls it once no turn runs, so no event is delivered
// after it.
func (h *wsHub) closeOwn() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for _, ws := range h.listed() {
		if _, remote := ws.c.(*remoteConn); !remote {
			ws.c.StartClose(&wsconn.End{Code: CloseGoingAway, Reason: "runtime shutting down"})
		}
	}
}

// closeRelay forgets the handles of other nodes' connections still listed (their edges follow
// their objects elsewhere), stops the relay (this node's clients of objects owned elsewhere are
// closed with 1001), and waits until every connection is gone (each client has closeGrace to
// answer).
func (h *wsHub) closeRelay() error {
	for _, ws := range h.listed() {
		if rc, remote := ws.c.(*remoteConn); remote {
			rc.forget()
		}
	}
	h.relay.close()
	h.wg.Wait()
	return nil
}

// listed returns every connection the hub lists.
func (h *wsHub) listed() []*WebSocket {
	h.mu.Lock()
	defer h.mu.Unlock()
	var all []*WebSocket
	for _, g := range h.groups {
		for _, ws := range g.conns {
			if ws != nil {
				all = append(all, ws)
			}
		}
	}
	return all
}

func (h *wsHub) upgrader(rt *Runtime) *websocket.Upgrader {
	h.once.Do(func() { h.up = wsconn.NewUpgrader(rt.checkOrigin) })
	return h.up
}

// checkOrigin lets a request open a WebSocket if it has no Origin header (not a browser), if its
// Origin's host is the request's own, or if its Origin is in Options.WebSocketOrigins ("*": any).
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

// read is the reader goroutine, owned by the hub.
func (ws *WebSocket) read() {
	defer ws.rt.ws.wg.Done()
	ws.ended(ws.c.(*wsconn.Conn).Serve(ws.onMessage))
}

// ended delivers the end of a connection, once the messages read before it are delivered: the
// object's close or error event, then the attachment goes.
func (ws *WebSocket) ended(e wsconn.Ending) {
	for range wsInFlight { // the messages read are delivered before the end is
		ws.inflight <- struct{}{}
	}
	var event func(context.Context, any) error
	switch {
	case e.Err != nil && !ws.noError:
		err := e.Err
		if errors.Is(err, websocket.ErrReadLimit) {
			err = fmt.Errorf("%w: websocket message over the limit of %d bytes; closed with 1009", ErrTooLarge, ws.rt.opts.WebSocketMaxMessage)
		} else if e.Peer {
			err = fmt.Errorf("core: websocket protocol error, closed with 1002: %w", err)
		}
		event = func(ctx context.Context, inst any) error {
			if h, ok := inst.(WebSocketErrorHandler); ok {
				return h.WebSocketError(ctx, ws, err)
			}
			return nil
		}
	case e.Peer && e.Err == nil && !ws.noClose:
		event = func(ctx context.Context, inst any) error {
			if h, ok := inst.(WebSocketCloseHandler); ok {
				return h.WebSocketClose(ctx, ws, e.Code, e.Reason)
			}
			return nil
		}
	}
	if errors.Is(e.Err, ErrSlowClient) {
		ws.slowCut()
	}
	if event != nil {
		err := ws.deliver("durable.websocket.close", func(ctx context.Context, inst any) error {
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

// wsInFlight bounds the messages of one connection whose turns are queued or committing. The reader
// does not wait for a message's turn before it reads the next one: consecutive messages of one
// connection queue one after the other (their order kept) and share a group commit.
const wsInFlight = 32

func (ws *WebSocket) onMessage(f wsconn.Frame) { ws.onFrame(f, nil, nil) }

// onFrame delivers a message read; outcome, if set, is told the outcome of its turn (nil for an
// auto-response), and a turn refused because another node owns the object (ErrNotOwner, ErrFenced:
// nothing of it is durable) is its business alone: the connection stays open.
func (ws *WebSocket) onFrame(f wsconn.Frame, num *frameNum, outcome func(error)) {
	if ar := ws.group.auto.Load(); ar != nil && !f.Binary && string(f.Data) == ar.request {
		ws.autoAt.Store(ws.rt.now().UnixNano())
		ws.c.Enqueue(wsconn.Frame(ar.response))
		if outcome != nil {
			outcome(nil)
		}
		return
	}
	ws.inflight <- struct{}{}
	ws.ns.count(telemetry.MessageIn)
	ws.post(outcome, num, func(ctx context.Context, inst any) error {
		if !ws.c.Open() {
			return nil // closed while the message waited (its accept was rolled back, say)
		}
		if num != nil {
			num.turn = ctx.(*turn)
			if seen, err := num.seen(num.turn); seen || err != nil {
				return err // delivered already, by an owner lost before it answered
			}
		}
		if h, ok := inst.(WebSocketMessageHandler); ok {
			if err := h.WebSocketMessage(ctx, ws, Message(f)); err != nil {
				return err
			}
		}
		if num != nil {
			return num.record(ctx.(*turn))
		}
		return nil
	})
}

// delivered handles the outcome of a message's turn.
func (ws *WebSocket) delivered(err error) {
	switch {
	case err == nil || errors.Is(err, ErrClosed):
	case errors.Is(err, ErrOverloaded):
		ws.c.StartClose(&wsconn.End{Code: CloseTryAgainLater, Reason: "object overloaded"})
	case errors.Is(err, ErrNotOwner) || errors.Is(err, ErrFenced):
		ws.c.StartClose(&wsconn.End{Code: CloseServiceRestart, Reason: "object moved"})
	default:
		ws.rt.log.Error("websocket message handler failed", "event", "websocket_handler_failed",
			"namespace", ws.ns.name, "name", ws.name, "error", err)
		ws.c.StartClose(&wsconn.End{Code: CloseInternalError, Reason: "internal error"})
	}
}

// post queues fn as a turn of the owning object (re-created if evicted) without waiting for it; its
// outcome goes to delivered (and to outcome, if set) once its writes are durable, and its
// in-flight token is returned.
func (ws *WebSocket) post(outcome func(error), num *frameNum, fn func(context.Context, any) error) {
	rt := ws.rt
	ctx, sp := rt.eventSpan(rt.base, "durable.websocket.message", ws.ns, ws.name)
	if num != nil { // an Await in the turn commits its number with its writes (wsexact.go)
		ctx = context.WithValue(ctx, frameKey{}, num)
	}
	var t *turn // the posted turn, for its measurements
	delivered := func(err error) {
		if outcome == nil || !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrFenced) {
			ws.delivered(err)
		}
		if outcome != nil {
			outcome(err)
		}
	}
	done := func(err error) {
		if t != nil {
			t.posted(err)
		}
		eventEnd(sp, err)
		delivered(err)
		<-ws.inflight
		rt.leave()
	}
	if err := rt.enter(); err != nil {
		eventEnd(sp, err)
		delivered(err)
		<-ws.inflight
		return
	}
	err := ws.ns.with(ws.name, ws.id, placement{}, func(o *object) error {
		t = &turn{Context: ctx, o: o}
		err := o.postTurn(t, codeFunc(fn), done)
		if err != nil {
			t = nil
		}
		return err
	})
	if err != nil {
		done(err)
	}
}

// deliver runs fn as a turn of the owning object, re-creating it if evicted, as Stub.call does; span
// names the delivery's span.
func (ws *WebSocket) deliver(span string, fn func(context.Context, any) error) (err error) {
	rt := ws.rt
	if err := rt.enter(); err != nil {
		return err
	}
	defer rt.leave()
	ctx, sp := rt.eventSpan(rt.base, span, ws.ns, ws.name)
	defer func() { eventEnd(sp, err) }()
	return ws.ns.with(ws.name, ws.id, placement{}, func(o *object) error { return o.run(ctx, fn) })
}

// counts returns the open connections per namespace.
func (h *wsHub) counts() map[*namespace]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[*namespace]int)
	for k, g := range h.groups {
		out[k.ns] += g.live
	}
	return out
}

// retire marks the connection closed and drops its attachment.
func (ws *WebSocket) retire() {
	ws.mu.Lock()
	ws.closed, ws.attach = true, nil
	ws.mu.Unlock()
}
