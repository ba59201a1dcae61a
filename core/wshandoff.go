package core

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/durable-go/durable/core/internal/wsconn"
)

// A hand-over's WebSockets (wsrelay.go). When this node hands a shard over to the node placement
// picks (internal/replica, handover.go), the handles of the shard's connections, which this node
// lists as their objects' owner, go to that node before the lease does: it lists them before it
// may run a turn of their objects, so that no message an object sends there misses a connection
// whose edge has not registered it yet. The edges register with the new owner as after any move,
// and find their connections listed. Handles the new owner does not take (it cannot be reached,
// or does not serve their namespace) are closed with CloseServiceRestart: the clients reconnect,
// and are told, rather than miss messages unawares.

// wireAdopt is a connection's handle, handed off to the next owner of its object.
type wireAdopt struct {
	Sock    string          `json:"sock"`
	Edge    string          `json:"edge"`
	Tags    []string        `json:"tags,omitempty"`
	Attach  json.RawMessage `json:"attach,omitempty"`
	NoClose bool            `json:"noclose,omitempty"`
	NoError bool            `json:"noerror,omitempty"`
}

// handOff hands the handles this node lists of shard's objects to the node to, the hand-over's
// pick (replica.Config.HandOff): one call per object, half a lease time at most for them all (the
// lease is no longer renewed). A handle taken is forgotten here; one not taken is closed with
// CloseServiceRestart.
func (rt *Runtime) handOff(shard int, to string) {
	r := rt.ws.relay
	if r == nil || rt.router == nil {
		return
	}
	byObject := map[wsKey][]*WebSocket{}
	var keys []wsKey
	r.mu.Lock()
	closing := rt.isClosed.Load() // a drain: this node's own edge closes its clients (1001)
	for _, ws := range r.handles {
		if rt.cluster.ShardOf(ws.ns.name, ws.name) != shard {
			continue
		}
		if closing && ws.c.(*remoteConn).edge == r.node {
			continue // not handed: the next owner would list a connection that is about to close
		}
		k := wsKey{ws.ns, ws.name}
		if byObject[k] == nil {
			keys = append(keys, k)
		}
		byObject[k] = append(byObject[k], ws)
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, r.ttl/2)
	defer cancel()
	for _, k := range keys {
		handles := rt.ws.inOrder(byObject[k]) // as the object lists them: WebSockets keeps its order
		taken := r.adopt(ctx, to, handles)
		for _, ws := range handles {
			rc := ws.c.(*remoteConn)
			if slices.Contains(taken, rc.sock) {
				rc.forget()
			} else {
				rc.StartClose(&wsconn.End{Code: CloseServiceRestart, Reason: "object moved"})
			}
		}
	}
}

// adopt sends handles, all of one object, to the node to, and returns the connections it took.
func (r *wsRelay) adopt(ctx context.Context, to string, handles []*WebSocket) []string {
	w := &wireWS{Op: "adopt"}
	for _, ws := range handles {
		rc := ws.c.(*remoteConn)
		if !rc.Open() {
			continue
		}
		ws.mu.Lock()
		attach := slices.Clone(ws.attach)
		ws.mu.Unlock()
		w.Adopt = append(w.Adopt, wireAdopt{Sock: rc.sock, Edge: rc.edge, Tags: ws.tags, Attach: attach,
			NoClose: ws.noClose, NoError: ws.noError})
	}
	if len(w.Adopt) == 0 {
		return nil
	}
	req, err := encodeCall(&wireCall{ID: r.newID(), From: r.node, NS: handles[0].ns.name, Name: handles[0].name, WS: w})
	if err != nil {
		return nil
	}
	var taken []string
	reply, err := r.rt.router.calls.Send(ctx, to, req)
	if err == nil {
		var result []byte
		var we *wireErr
		if result, _, we, err = decodeReply(reply); err == nil && we != nil {
			err = errors.New(we.Msg)
		}
		if err == nil {
			err = json.Unmarshal(result, &taken)
		}
	}
	if err != nil {
		r.rt.log.Warn("a hand-over's WebSockets could not be handed to the next owner: closed with 1012", "event", "websocket_handoff_failed",
			"namespace", handles[0].ns.name, "name", handles[0].name, "to", to, "error", err)
		return nil
	}
	return taken
}

// serveAdopt lists the handles another node hands off with the shard of the object ns/name, and
// returns the connections it listed. Should this node not take the shard after all, its watcher
// forgets them once the table names the shard's holder, and their edges register them there.
func (r *wsRelay) serveAdopt(ns *namespace, name, from string, in *wireWS) ([]byte, error) {
	taken := []string{}
	for _, a := range in.Adopt {
		if a.Sock == "" || a.Edge == "" {
			continue
		}
		r.mu.Lock()
		ws := r.handles[a.Sock]
		r.mu.Unlock()
		if ws != nil { // listed here already
			if ws.ns == ns && ws.name == name {
				taken = append(taken, a.Sock)
			}
			continue
		}
		if _, err := r.listRemote(ns, name, a.Edge, a.Sock, &wireSock{Tags: a.Tags, Attach: a.Attach}, a.NoClose, a.NoError); err != nil {
			r.rt.log.Warn("a WebSocket handed off could not be listed", "event", "websocket_adopt_failed",
				"namespace", ns.name, "name", name, "from", from, "error", err)
			continue
		}
		taken = append(taken, a.Sock)
	}
	return json.Marshal(taken)
}
