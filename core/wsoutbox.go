package core

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/durable-go/durable/replog"
)

// The owner's side of WebSockets in cluster mode (see wsrelay.go): what the object's turns release
// for connections other nodes hold waits in one outbox per edge, sent one call at a time.

// push queues it for edge, and starts the edge's sender if none runs.
func (r *wsRelay) push(edge string, it wireItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	ob := r.outboxes[edge]
	if ob == nil {
		ob = &wsOutbox{edge: edge}
		r.outboxes[edge] = ob
	}
	if n := len(ob.items); n > 0 && sameFrame(&ob.items[n-1], &it) { // a broadcast: its message once per edge
		ob.items[n-1].More = append(ob.items[n-1].More, it.Sock)
	} else {
		ob.items = append(ob.items, it)
	}
	if !ob.sending {
		ob.sending = true
		r.wg.Add(1)
		go r.sendOut(ob)
	}
}

// sameFrame reports whether b is a message that a, the last item waiting, already carries (the
// same bytes: a broadcast's), so that b's connection joins a's list, its order kept.
func sameFrame(a, b *wireItem) bool {
	return a.Close == nil && !a.SetAttach && b.Close == nil && !b.SetAttach && a.Binary == b.Binary &&
		len(a.Data) == len(b.Data) && len(a.Data) > 0 && &a.Data[0] == &b.Data[0]
}

// wsOutbox is what waits for one edge.
type wsOutbox struct {
	edge    string
	items   []wireItem // guarded by the relay's mu, as is sending
	sending bool
}

// sendOut is an edge's sender: it sends what waits, one call at a time, until nothing does.
func (r *wsRelay) sendOut(ob *wsOutbox) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		items := ob.items
		ob.items = nil
		if len(items) == 0 || r.closed {
			ob.sending = false
			if len(ob.items) == 0 && r.outboxes[ob.edge] == ob {
				delete(r.outboxes, ob.edge)
			}
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		unknown, err := r.sendItems(ob.edge, items)
		r.mu.Lock()
		for _, it := range items {
			if it.Close == nil && !it.SetAttach {
				for _, sock := range append([]string{it.Sock}, it.More...) {
					if ws := r.handles[sock]; ws != nil {
						ws.c.(*remoteConn).queued.Add(-1)
					}
				}
			}
		}
		r.mu.Unlock()
		switch {
		case errors.Is(err, ErrClosed):
		case err != nil: // the edge is gone, and its clients' connections with it
			r.edgeGone(ob.edge)
		default:
			for _, sock := range unknown {
				r.lost(sock)
			}
		}
	}
}

// sendItems sends items to edge until it answers (with the connections it no longer holds), the
// membership declares it dead, or the relay closes.
func (r *wsRelay) sendItems(edge string, items []wireItem) ([]string, error) {
	if edge == r.node {
		return r.serveOut(items), nil
	}
	req, err := encodeCall(&wireCall{ID: r.newID(), From: r.node, WS: &wireWS{Op: "out", Items: items}})
	if err != nil {
		return nil, err
	}
	for {
		reply, err := r.send(edge, req)
		if err == nil {
			var unknown []string
			result, _, we, err := decodeReply(reply)
			if err == nil && we != nil {
				err = errors.New(we.Msg)
			}
			if err == nil {
				err = json.Unmarshal(result, &unknown)
			}
			return unknown, err
		}
		if errors.Is(err, replog.ErrCallTooLarge) {
			return nil, err
		}
		if !r.alive(edge) {
			return nil, err
		}
		if err := r.pause(); err != nil {
			return nil, err
		}
	}
}

// send sends one call to node, within the calls' timeout or until the relay closes.
func (r *wsRelay) send(node string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.rt.router.opts.timeout)
	defer cancel()
	return r.rt.router.calls.Send(ctx, node, req)
}

// sendWatched is send for an "in" call: it stops waiting for the reply once the membership declares
// node dead (its beats stopped), rather than for the call's whole timeout, so that the messages go
// to the object's next owner (ErrNoReply: they may have been delivered, see sendIn).
func (r *wsRelay) sendWatched(node string, req []byte) ([]byte, error) {
	if !r.alive(node) { // not known alive: nothing to watch
		return r.send(node, req)
	}
	reply, _, err := sendWatching(r.ctx, r.rt.router.calls, node, req, r.rt.router.opts.timeout, r.ttl/8,
		func() bool { return !r.alive(node) })
	return reply, err
}
