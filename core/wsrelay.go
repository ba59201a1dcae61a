package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core/internal/wsconn"
)

// WebSockets in cluster mode. In cluster mode with Replication.Calls (and HTTP relaying on), a
// WebSocket upgrade is accepted at the node that received it, the edge, whichever node owns the
// object: the edge holds the TCP connection and its reader and writer; the owner holds the
// object's handle (*WebSocket), listed by State.WebSockets with the others, whichever edge holds
// them. Between the two, calls over Replication.Calls:
//   - "in", edge to owner: the messages a connection read, in order, one call at a time per
//     connection, each with a request id (a call sent again is answered, not delivered twice),
//     then how it ended; the first call to an owner carries the connection's record (tags and
//     attachment), so that an owner that does not know it yet lists it (re-attach).
//   - "out", owner to edge: what the object's turns released (messages, closes) and attachment
//     changes, for every connection of that edge, in order per connection, one call at a time per
//     edge.
//   - "adopt", owner to the next owner, as a hand-over hands the lease back: the handles of the
//     object's connections, so that the next owner lists them before it runs a turn (wshandoff.go).
//
// When the object's shard moves (hand-over or takeover), each edge sees the new owner in its table
// and registers its connections there (after a hand-over, it finds them listed already); the old
// owner forgets its handles without closing them. An
// owner forgets the handles of an edge the membership declares dead, as closed with 1006 (the
// client's TCP is gone with the edge). An edge that cannot reach an owner for wsOwnerGrace closes
// the connection with CloseServiceRestart, and so does one whose messages' fate is unknown (the
// owner that was sent them died before answering), so that the client reconnects and resumes.
// The node itself is an edge like the others: a connection whose object this node owns is relayed
// to it without leaving the process.

// wsReadyGrace is how long an edge that is ready waits for an owner of a connection's object
// before it closes the connection with 1012 (at least four lease times).
const wsReadyGrace = 30 * time.Second

// wsRelay is a node's side of it: the handles of connections other nodes hold (owner side) and the
// connections this node holds (edge side). It owns the goroutines that send (one per edge with
// traffic waiting, one per connection with messages waiting), the edge's readers, and a watcher
// while there is a connection; close stops them and waits.
type wsRelay struct {
	rt    *Runtime
	node  string
	ttl   time.Duration // the lease time: the table learns a new owner within it
	grace time.Duration // how long an edge that is not ready tries to reach an owner before it closes with 1012
	// readyGrace is how long an edge that is ready does (gaveUp).
	readyGrace time.Duration
	seq        atomic.Uint64

	mu       sync.Mutex // protects the fields below
	closed   bool
	watching bool
	handles  map[string]*WebSocket // owner side, by socket id
	outboxes map[string]*wsOutbox  // owner side, by edge
	socks    map[string]*edgeSock  // edge side, by socket id
	stop     chan struct{}         // closed by close
	ctx      context.Context       // the calls' context, cancelled by close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newWSRelay(rt *Runtime, r *Replication) *wsRelay {
	ttl := r.leaseTTL()
	ctx, cancel := context.WithCancel(context.Background())
	return &wsRelay{rt: rt, node: r.Node, ttl: ttl, grace: 4 * ttl, readyGrace: max(wsReadyGrace, 4*ttl), handles: map[string]*WebSocket{},
		outboxes: map[string]*wsOutbox{}, socks: map[string]*edgeSock{}, stop: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// edgeKey marks a relayed upgrade's request context with its edgeUpgrade.
type edgeKey struct{}

// edgeUpgrade is an upgrade held at an edge, which the object may accept.
type edgeUpgrade struct {
	edge, sock string
	ws         *WebSocket // the handle, once accepted
}

// remoteConn is the transport of a handle whose connection an edge holds.
type remoteConn struct {
	r          *wsRelay
	ws         *WebSocket
	edge, sock string
	shut       atomic.Bool
	queued     atomic.Int64 // messages in the edge's outbox
}

func (c *remoteConn) Open() bool { return !c.shut.Load() }

// Enqueue queues f for the edge; a connection with Options.WebSocketSendQueue messages waiting for
// its edge is cut off with 1013, as a slow client is.
func (c *remoteConn) Enqueue(f wsconn.Frame) bool {
	if c.shut.Load() {
		return false
	}
	if c.queued.Add(1) > int64(c.r.rt.opts.WebSocketSendQueue) {
		c.queued.Add(-1)
		c.StartClose(&wsconn.End{Code: CloseTryAgainLater, Reason: "edge too slow"})
		return false
	}
	c.r.push(c.edge, wireItem{Sock: c.sock, Data: f.Data, Binary: f.Binary})
	return true
}

// StartClose unlists the handle and sends the close to the edge, after the messages before it.
func (c *remoteConn) StartClose(end *wsconn.End) {
	if c.forget() {
		c.r.push(c.edge, wireItem{Sock: c.sock, Close: &wsconn.End{Code: end.Code, Reason: end.Reason}})
	}
}

func (c *remoteConn) Drop() {
	c.StartClose(&wsconn.End{Code: CloseInternalError, Reason: "internal error"})
}

// forget unlists the handle without telling its edge, and reports whether it was listed.
func (c *remoteConn) forget() bool {
	if c.shut.Swap(true) {
		return false
	}
	c.r.mu.Lock()
	if c.r.handles[c.sock] == c.ws {
		delete(c.r.handles, c.sock)
	}
	c.r.mu.Unlock()
	c.r.rt.ws.unlist(c.ws)
	return true
}

func (c *remoteConn) setAttachment(b []byte) {
	if !c.shut.Load() {
		c.r.push(c.edge, wireItem{Sock: c.sock, Attach: b, SetAttach: true})
	}
}

// listRemote lists a handle for the connection sock that edge holds.
// noClose and noError say the object lacks WebSocketClose, WebSocketError.
func (r *wsRelay) listRemote(ns *namespace, name, edge, sock string, rec *wireSock, noClose, noError bool) (*WebSocket, error) {
	if len(rec.Tags) > MaxTags || len(rec.Attach) > MaxAttachmentLen {
		return nil, fmt.Errorf("%w: a WebSocket's record over the limits", ErrInvalidArgument)
	}
	ws := &WebSocket{rt: r.rt, ns: ns, name: name, id: objectID(ns.name, name), tags: slices.Clone(rec.Tags),
		inflight: make(chan struct{}, wsInFlight), noClose: noClose, noError: noError}
	if len(rec.Attach) > 0 {
		ws.attach = slices.Clone(rec.Attach)
	}
	ws.c = &remoteConn{r: r, ws: ws, edge: edge, sock: sock}
	if err := r.rt.ws.add(ws, false); err != nil {
		return nil, err
	}
	r.mu.Lock()
	old := r.handles[sock]
	r.handles[sock] = ws
	r.watchLocked()
	r.mu.Unlock()
	if old != nil {
		old.c.(*remoteConn).forget()
	}
	return ws, nil
}

// acceptRelayed is AcceptWebSocket for an upgrade held at an edge: the object's handle, listed at
// once; the edge upgrades the connection once the turn's writes are durable, and closes it with
// 1011 if the turn fails.
func acceptRelayed(t *turn, eu *edgeUpgrade, tags []string) (*WebSocket, error) {
	o := t.o
	if eu.ws != nil {
		return nil, errors.New("core: AcceptWebSocket: the request's connection is accepted already")
	}
	noClose, noError := o.lacksWebSocketHandlers()
	ws, err := o.rt.ws.relay.listRemote(o.ns, o.name, eu.edge, eu.sock, &wireSock{Tags: tags}, noClose, noError)
	if err != nil {
		return nil, err
	}
	t.emit(effect{kind: effAccept, ws: ws})
	eu.ws = ws
	return ws, nil
}

// serve serves a WebSocket call another node sent: "in" here as the owner, "out" as the edge.
func (r *wsRelay) serve(ctx context.Context, ns *namespace, w *wireCall) ([]byte, error) {
	switch {
	case r == nil:
		return nil, fmt.Errorf("%w: node does not relay WebSockets", ErrNoMethod)
	case w.WS.Op == "out":
		return json.Marshal(r.serveOut(w.WS.Items))
	case ns == nil:
		return nil, fmt.Errorf("%w: namespace %q is not registered on node %q", ErrNoMethod, w.NS, r.node)
	}
	if err := validateName(w.Name); err != nil {
		return nil, err
	}
	if w.WS.Op == "adopt" {
		return r.serveAdopt(ns, w.Name, w.From, w.WS)
	}
	return r.serveIn(ctx, ns, w.Name, w.From, w.WS)
}

// serveIn delivers what an edge read from a connection of the object ns/name, as the owner: each
// message is queued as a turn, in order (the reply does not wait for them); the connection's end
// is delivered after them.
func (r *wsRelay) serveIn(ctx context.Context, ns *namespace, name, edge string, in *wireWS) ([]byte, error) {
	if holder, _ := r.rt.cluster.Owner(r.rt.cluster.ShardOf(ns.name, name)); holder != "" {
		return nil, &Error{Op: "websocket", Namespace: ns.name, Name: name, Err: &NotOwnerError{Key: ns.name + "/" + name, Holder: holder}}
	}
	r.mu.Lock()
	ws := r.handles[in.Sock]
	r.mu.Unlock()
	if ws != nil && (ws.ns != ns || ws.name != name) {
		return nil, fmt.Errorf("%w: socket %q belongs to another object", ErrInvalidArgument, in.Sock)
	}
	if ws == nil {
		if in.Record == nil {
			return replyUnknown, nil
		}
		// Registered only where the object may run: a turn takes its shard's lease, or fails.
		if err := r.rt.enter(); err != nil {
			return nil, err
		}
		var hasClose, hasError bool
		err := ns.with(name, objectID(ns.name, name), placement{}, func(o *object) error {
			return o.run(ctx, func(_ context.Context, inst any) error {
				_, hasClose = inst.(WebSocketCloseHandler)
				_, hasError = inst.(WebSocketErrorHandler)
				return nil
			})
		})
		r.rt.leave()
		if err != nil {
			return nil, err
		}
		if ws, err = r.listRemote(ns, name, edge, in.Sock, in.Record, !hasClose, !hasError); err != nil {
			return nil, err
		}
	}
	outcomes := make([]chan error, len(in.Frames))
	for i, f := range in.Frames {
		ch := make(chan error, 1)
		outcomes[i] = ch
		var num *frameNum
		if in.Seq > 0 {
			num = &frameNum{sock: in.Sock, seq: in.Seq + uint64(i), resent: in.Resent}
		}
		ws.onFrame(wsconn.Frame{Data: f.Data, Binary: f.Binary}, num, func(err error) { ch <- err })
	}
	// The reply waits for the messages' turns: those refused because another node owns the object
	// now (nothing of them durable) are for the edge to send there.
	moved := -1
	for i, ch := range outcomes {
		err := <-ch
		switch {
		case errors.Is(err, ErrNotOwner) || errors.Is(err, ErrFenced):
			if moved < 0 {
				moved = i
			}
		case err == nil && moved >= 0: // ran after one that was refused: the order is lost
			ws.c.StartClose(&wsconn.End{Code: CloseServiceRestart, Reason: "object moved"})
		}
	}
	if moved >= 0 {
		return json.Marshal(inReply{Done: moved})
	}
	if in.End != nil && ws.c.(*remoteConn).forget() {
		ws.ended(in.End.ending())
	}
	return []byte("null"), nil
}

// inReply is an owner's answer to "in" when the messages from Done on were refused: another node
// owns the object now.
type inReply struct {
	Done int `json:"done"`
}

// pause waits a moment before a call is sent again; it fails once the relay closes.
func (r *wsRelay) pause() error {
	t := time.NewTimer(r.ttl / 8)
	defer t.Stop()
	select {
	case <-r.stop:
		return ErrClosed
	case <-t.C:
		return nil
	}
}

// alive reports whether the membership has node alive.
func (r *wsRelay) alive(node string) bool {
	for _, m := range r.rt.cluster.Members() {
		if m.Name == node {
			return m.Alive
		}
	}
	return false
}

func (r *wsRelay) newID() string {
	var id [8]byte
	rand.Read(id[:])
	return fmt.Sprintf("ws-%s-%d", hex.EncodeToString(id[:]), r.seq.Add(1))
}

// lost unlists the handle of a connection its edge no longer holds (it ended, and the end went to
// another owner, or nowhere), as closed with 1006.
func (r *wsRelay) lost(sock string) {
	r.mu.Lock()
	ws := r.handles[sock]
	r.mu.Unlock()
	if ws != nil && ws.c.(*remoteConn).forget() {
		r.ended(ws)
	}
}

// ended delivers a lost connection's end on a goroutine of the relay's.
func (r *wsRelay) ended(ws *WebSocket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ws.ended(wsconn.Ending{Peer: true, Code: CloseAbnormal})
	}()
}

// edgeGone unlists every handle of a dead edge's connections, as closed with 1006.
func (r *wsRelay) edgeGone(edge string) {
	r.mu.Lock()
	var gone []string
	for sock, ws := range r.handles {
		if ws.c.(*remoteConn).edge == edge {
			gone = append(gone, sock)
		}
	}
	r.mu.Unlock()
	for _, sock := range gone {
		r.lost(sock)
	}
}

// watchLocked starts the watcher if none runs.
func (r *wsRelay) watchLocked() {
	if !r.watching && !r.closed {
		r.watching = true
		r.wg.Add(1)
		go r.watch()
	}
}

// watch looks at the table every eighth of the lease time while there are connections: an edge
// registers its connections with their objects' new owners, an owner forgets the handles of
// objects another node now owns and of edges declared dead.
func (r *wsRelay) watch() {
	defer r.wg.Done()
	t := time.NewTicker(r.ttl / 8)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		if len(r.handles) == 0 && len(r.socks) == 0 {
			r.watching = false
			r.mu.Unlock()
			return
		}
		handles := make([]*WebSocket, 0, len(r.handles))
		for _, ws := range r.handles {
			handles = append(handles, ws)
		}
		socks := make([]*edgeSock, 0, len(r.socks))
		for _, s := range r.socks {
			socks = append(socks, s)
		}
		r.mu.Unlock()
		for _, ws := range handles {
			rc := ws.c.(*remoteConn)
			shard := r.rt.cluster.ShardOf(ws.ns.name, ws.name)
			if holder, _ := r.rt.cluster.Owner(shard); holder != "" && !r.rt.cluster.HandedHere(shard) {
				rc.forget() // its edge registers it with holder
			} else if rc.edge != r.node && !r.alive(rc.edge) {
				r.edgeGone(rc.edge)
			}
		}
		for _, s := range socks {
			s.follow()
		}
	}
}

// close stops the relay: the connections this node holds close with 1001, the handles of the
// others' are forgotten (their edges register them elsewhere); it waits for its goroutines.
func (r *wsRelay) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.stop)
	r.cancel()
	socks := make([]*edgeSock, 0, len(r.socks))
	for _, s := range r.socks {
		socks = append(socks, s)
	}
	r.mu.Unlock()
	for _, s := range socks {
		s.shutdown()
	}
	r.wg.Wait()
}
