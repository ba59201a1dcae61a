package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core/internal/wsconn"
	"github.com/durable-go/durable/replog"
)

// The edge's side of WebSockets in cluster mode (see wsrelay.go): the connections this node holds
// for objects wherever they run.

// edgeSock is a connection this node holds. Its reader hands what it reads to a sender goroutine,
// which sends it to the object's owner one call at a time (at most wsInFlight messages wait; past
// that the reader waits, and TCP holds the client back).
type edgeSock struct {
	r      *wsRelay
	id     string
	ns     *namespace
	name   string
	shard  int
	tokens chan struct{} // one per message read and not yet answered by the owner

	mu       sync.Mutex   // protects the fields below
	c        *wsconn.Conn // nil until the upgrade is made
	rec      wireSock     // tags and attachment, for the next owner
	early    []wireItem   // the owner's output that came before the upgrade was made
	pending  []wireItem   // messages read, waiting for the sender
	end      *wireEnd     // how the connection ended, for the owner
	refollow bool         // register with the owner in the table, nothing else to send
	sending  bool
	numbered uint64 // the messages handed to the sender so far: the next is numbered numbered+1
	owner    string // the node that lists it; "" none known
	detached bool   // nothing more goes to an owner: it closed the connection, or none answered
}

// upgrade serves a WebSocket upgrade for the object ns/name: the request goes to the object's
// owner (this node or another) as a relayed request, marked with the connection's id; if the
// object accepts it, the connection is upgraded here and its traffic relayed, otherwise the
// owner's response is written.
func (r *wsRelay) upgrade(w http.ResponseWriter, req *http.Request, ns *namespace, name string) {
	if req.Method != http.MethodGet || !websocket.IsWebSocketUpgrade(req) || !r.rt.checkOrigin(req) ||
		req.Header.Get("Sec-Websocket-Version") != "13" || req.Header.Get("Sec-Websocket-Key") == "" {
		// gorilla writes the handshake's error response.
		if c, err := wsconn.Upgrade(r.rt.ws.upgrader(r.rt), w, req, wsconn.Options{OnClose: func() {}}); err == nil {
			c.Drop()
		}
		return
	}
	s := &edgeSock{r: r, id: r.node + "-" + strconv.FormatUint(r.seq.Add(1), 10), ns: ns, name: name,
		shard: r.rt.cluster.ShardOf(ns.name, name), tokens: make(chan struct{}, wsInFlight)}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	r.socks[s.id] = s
	r.watchLocked()
	r.wg.Add(1) // close waits for the upgrade: a client that has its 101 hears the close too
	r.mu.Unlock()
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(req.Context()) // close ends a call still out
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	hr := &wireHTTP{Method: req.Method, URL: req.URL.String(), Host: req.Host, RemoteAddr: req.RemoteAddr,
		Header: req.Header.Clone(), Socket: s.id}
	rc := routedCall{ns: ns, name: name, method: "http", http: hr}
	rc.local = func(ctx context.Context) error {
		reply, err := r.rt.router.serveHTTP(ctx, ns, &wireCall{From: r.node, NS: ns.name, Name: name, HTTP: hr})
		rc.httpReply = reply
		return err
	}
	err := r.rt.router.call(ctx, &rc)
	hrep := rc.httpReply
	switch {
	case err == nil && hrep != nil && hrep.Status == http.StatusSwitchingProtocols:
		s.mu.Lock()
		s.rec.Tags = hrep.Tags
		if s.rec.Attach == nil { // unless a later one came first
			s.rec.Attach = hrep.Attach
		}
		s.owner = r.ownerOf(s.shard)
		s.mu.Unlock()
		c, err := wsconn.Upgrade(r.rt.ws.upgrader(r.rt), w, req, wsconn.Options{
			ReadLimit: r.rt.opts.WebSocketMaxMessage, Queue: r.rt.opts.WebSocketSendQueue,
			Slow: ErrSlowClient, BadText: ErrInvalidText, OnClose: func() {}})
		if err != nil { // the client went: the owner hears it ended
			s.mu.Lock()
			s.end = &wireEnd{Peer: true, Code: CloseAbnormal}
			s.kickLocked()
			s.mu.Unlock()
			return
		}
		s.start(c)
		return
	case err == nil && hrep != nil:
		h := w.Header()
		for k, v := range hrep.Header {
			h[k] = v
		}
		w.WriteHeader(hrep.Status)
		w.Write(hrep.Body)
	case errors.Is(err, ErrUnreachable):
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	default:
		(&gatedResponse{w: w, header: make(http.Header)}).finish(err, ns)
	}
	r.remove(s)
}

// start serves the upgraded connection c: the output that came early first, then its reader. The
// client has its 101 already: if the relay has closed meanwhile, c is closed with 1001 as every
// other connection (a dropped TCP connection would tell the client 1006), and the reader waits for
// the client's answer. The upgrade's count in wg keeps close waiting for the reader.
func (s *edgeSock) start(c *wsconn.Conn) {
	s.mu.Lock()
	s.c = c // from here a close of the relay finds c (shutdown)
	for _, it := range s.early {
		s.applyLocked(it)
	}
	s.early = nil
	s.mu.Unlock()
	s.r.mu.Lock()
	closed := s.r.closed // if not, the relay's close comes later and finds c
	s.r.wg.Add(1)
	s.r.mu.Unlock()
	if closed {
		s.shutdown()
	}
	go s.read()
}

// read is the connection's reader goroutine, owned by the relay.
func (s *edgeSock) read() {
	defer s.r.wg.Done()
	e := s.c.Serve(s.onMessage)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		s.r.remove(s)
		return
	}
	s.end = encodeEnd(e)
	s.kickLocked()
}

func (s *edgeSock) onMessage(f wsconn.Frame) {
	select {
	case s.tokens <- struct{}{}:
	case <-s.r.stop:
		return
	}
	s.mu.Lock()
	s.pending = append(s.pending, wireItem{Data: f.Data, Binary: f.Binary})
	s.kickLocked()
	s.mu.Unlock()
}

// kickLocked starts the sender if none runs.
func (s *edgeSock) kickLocked() {
	if s.sending {
		return
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.closed {
		return
	}
	s.sending = true
	s.r.wg.Add(1)
	go s.send()
}

// send is the connection's sender: it sends what waits to the owner, one call at a time, until
// nothing does. If no owner takes it within the relay's grace, or a call's fate is unknown, the
// connection is closed with CloseServiceRestart: the client reconnects.
func (s *edgeSock) send() {
	defer s.r.wg.Done()
	for {
		s.mu.Lock()
		frames, end, follow := s.pending, s.end, s.refollow
		s.pending, s.end, s.refollow = nil, nil, false
		if s.detached || len(frames) == 0 && end == nil && !follow {
			s.sending = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		w := &wireWS{Op: "in", Sock: s.id, Frames: frames, End: end}
		if len(frames) > 0 {
			s.mu.Lock()
			w.Seq = s.numbered + 1
			s.numbered += uint64(len(frames))
			s.mu.Unlock()
		}
		err := s.r.sendIn(s, w)
		for range frames {
			<-s.tokens
		}
		if end != nil {
			s.r.remove(s)
			return
		}
		if err != nil {
			s.mu.Lock()
			s.detached = true
			c := s.c
			s.sending = false
			s.mu.Unlock()
			if c != nil {
				c.StartClose(&wsconn.End{Code: CloseServiceRestart, Reason: "object unreachable"})
			}
			s.r.rt.log.Warn("a WebSocket could not follow its object: closed with 1012", "event", "websocket_unfollowed",
				"namespace", s.ns.name, "name", s.name, "error", err)
			return
		}
	}
}

// follow has the sender register the connection with the owner the table names, if another.
func (s *edgeSock) follow() {
	target := s.r.ownerOf(s.shard)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && !s.detached && s.owner != target {
		s.refollow = true
		s.kickLocked()
	}
}

// shutdown closes the connection with 1001 as the runtime closes.
func (s *edgeSock) shutdown() {
	s.mu.Lock()
	s.detached = true
	c := s.c
	s.mu.Unlock()
	if c != nil {
		c.StartClose(&wsconn.End{Code: CloseGoingAway, Reason: "runtime shutting down"})
	} else {
		s.r.remove(s)
	}
}

// applyLocked carries out an owner's item.
func (s *edgeSock) applyLocked(it wireItem) {
	switch {
	case it.SetAttach:
		s.rec.Attach = it.Attach
	case s.c == nil:
		s.early = append(s.early, it)
	case it.Close != nil:
		s.detached = true
		s.c.StartClose(it.Close)
	default:
		s.c.Enqueue(wsconn.Frame{Data: it.Data, Binary: it.Binary})
	}
}

// serveOut carries out an owner's items and returns the connections it names that this node does
// not hold.
func (r *wsRelay) serveOut(items []wireItem) []string {
	var unknown []string
	for _, it := range items {
		for _, sock := range append([]string{it.Sock}, it.More...) {
			r.mu.Lock()
			s := r.socks[sock]
			r.mu.Unlock()
			if s == nil {
				if !slices.Contains(unknown, sock) {
					unknown = append(unknown, sock)
				}
				continue
			}
			one := it // the message's bytes are shared, as a broadcast's are here
			one.Sock, one.More = sock, nil
			s.mu.Lock()
			s.applyLocked(one)
			s.mu.Unlock()
		}
	}
	return unknown
}

func (r *wsRelay) remove(s *edgeSock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.socks[s.id] == s {
		delete(r.socks, s.id)
	}
}

// ownerOf returns the node the table names for shard: this one if none other.
func (r *wsRelay) ownerOf(shard int) string {
	if o, _ := r.rt.cluster.Owner(shard); o != "" {
		return o
	}
	return r.node
}

// sendIn sends an "in" call for s to its object's owner, following the table and "moved" answers,
// with its record to an owner that does not list it yet. A call sent again after no reply keeps its
// id, so that the owner answers it from its memory rather than delivering it twice.
func (r *wsRelay) sendIn(s *edgeSock, w *wireWS) error {
	id := r.newID()
	since := r.rt.now()
	moved := ""
	for {
		target := moved
		if target == "" {
			target = r.ownerOf(s.shard)
		}
		moved = ""
		s.mu.Lock()
		w.Record = nil
		if s.owner != target {
			w.Record = &wireSock{Tags: s.rec.Tags, Attach: s.rec.Attach}
		}
		s.mu.Unlock()
		result, err := r.callIn(s, target, id, w)
		switch {
		case err == nil && bytes.Equal(result, replyUnknown):
			s.mu.Lock()
			s.owner = ""
			s.mu.Unlock()
			id, moved = r.newID(), target
			continue
		case err == nil && len(result) > 0 && result[0] == '{': // messages refused: the object moved
			var ir inReply
			if err := json.Unmarshal(result, &ir); err != nil || ir.Done < 0 || ir.Done > len(w.Frames) {
				return fmt.Errorf("core: a bad answer from node %q: %s", target, result)
			}
			w.Frames = w.Frames[ir.Done:]
			if w.Seq > 0 {
				w.Seq += uint64(ir.Done)
			}
			s.mu.Lock()
			s.owner = ""
			s.mu.Unlock()
			id = r.newID()
			if r.gaveUp(since) {
				return fmt.Errorf("core: no owner of %s/%q took its messages", s.ns.name, s.name)
			}
			if err := r.pause(); err != nil {
				return err
			}
			continue
		case err == nil:
			s.mu.Lock()
			s.owner = target
			s.mu.Unlock()
			return nil
		case errors.Is(err, ErrClosed) && target == r.node:
			return err // this runtime is closing
		case errors.Is(err, replog.ErrNoReply):
			// It may have been delivered: the same node is asked again, with the same id, while it
			// lives. Once it is gone, the messages go to the object's next owner marked as sent
			// before (from here on, wherever they go): it skips those the object's commits record
			// as delivered (frameNum, wsexact.go).
			w.Resent = w.Resent || w.Seq > 0
			if r.gaveUp(since) {
				return err
			}
			if r.alive(target) {
				moved = target
				continue
			}
			if !w.Resent {
				return err
			}
			s.mu.Lock()
			s.owner = ""
			s.mu.Unlock()
			id = r.newID()
			if err := r.pause(); err != nil {
				return err
			}
			continue
		}
		id = r.newID()
		var noe *NotOwnerError
		if errors.As(err, &noe) && noe.Holder != "" && noe.Holder != "another node" && noe.Holder != target {
			moved = noe.Holder
			continue
		}
		if !retryable(err) || r.gaveUp(since) {
			return err
		}
		if err := r.pause(); err != nil {
			return err
		}
	}
}

// gaveUp reports whether an edge that began sending a connection's messages at since stops trying
// to reach the object's owner. While this node is ready, the object may be between owners (its
// shard is taken over once the lease lapses, after the engine's election if the lost node led its
// group): the edge waits up to readyGrace, and the connection stays open. While it is not (it may
// be the one cut off, and the client reach the object through another node), it waits for grace,
// four lease times.
func (r *wsRelay) gaveUp(since time.Time) bool {
	d := r.rt.now().Sub(since)
	return d > r.readyGrace || d > r.grace && r.rt.cluster.Ready() != nil
}

// retryable reports whether an "in" call that failed with err may be sent again, there or elsewhere.
func retryable(err error) bool {
	for _, e := range []error{ErrUnreachable, replog.ErrUnreachable, ErrNotOwner, ErrFenced, ErrClosed, ErrOverloaded, ErrLeaseUnproven, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// callIn makes one "in" call to node, this one without leaving the process.
func (r *wsRelay) callIn(s *edgeSock, node, id string, w *wireWS) ([]byte, error) {
	if node == r.node {
		return r.serveIn(r.ctx, s.ns, s.name, r.node, w)
	}
	req, err := encodeCall(&wireCall{ID: id, From: r.node, NS: s.ns.name, Name: s.name, WS: w})
	if err != nil {
		return nil, err
	}
	reply, err := r.sendWatched(node, req)
	if err != nil {
		return nil, err
	}
	result, _, we, err := decodeReply(reply)
	if err != nil {
		return nil, err
	}
	if we != nil {
		return nil, we.decode(&routedCall{ns: s.ns, name: s.name}, node)
	}
	return result, nil
}
