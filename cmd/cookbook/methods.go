package main

// The methods the pattern routes call (core.Define): in cluster mode a
// request sent to any node is served, the method running at the object's
// owner (S-CL14); in one process each runs in place, as core.Call does.
// The patterns' own methods where one call is the route's answer (the
// limiter's Allow, a session's Touch and End); otherwise the workshop's,
// each one turn that reads what the answer shows, as the route did with a
// closure. The inventory race and the lab stay closures given to
// core.Call: the race's namespaces are made, one per Await, at the node a
// request reaches, so another node could not run its calls, and the lab is
// the original's hands-on session, as it was written. In cluster mode, at
// a node that does not own the object, they answer 421 naming the owner
// and its address.

import (
	"context"
	"errors"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/durable-go/durable/patterns/room"
	"github.com/durable-go/durable/patterns/session"
)

// methods are the routes' methods, defined once per namespace on every
// node alike.
type methods struct {
	limiter *limiter.Methods
	session *session.Methods

	// setValue sets a value in a session and answers with its deadline.
	setValue func(ctx context.Context, s *core.Stub[*session.Session], e sessionEntry) (sessionAnswer, error)
	// getValue reads a session's value and its deadline; Missing when
	// there is none (session.ErrNotFound), which crosses nodes as a field
	// where the error would arrive as its message only.
	getValue func(ctx context.Context, s *core.Stub[*session.Session], e sessionEntry) (sessionValue, error)
	// record counts n hits on a link, in one turn, and answers its total.
	record func(ctx context.Context, c *core.Stub[*counter.Counter], r counterHits) (counterAnswer, error)
	// counted answers a link's total, its pending flush and what the
	// analytics store holds: the store of the node that runs it, the
	// owner's, where the counter's flush writes.
	counted func(ctx context.Context, c *core.Stub[*counter.Counter], link string) (counterAnswer, error)
	// roomState answers a room's offset and members, and in cluster mode
	// the node that owns the room, where its WebSockets are accepted.
	roomState func(ctx context.Context, r *core.Stub[*room.Room], _ struct{}) (roomAnswer, error)
}

type sessionEntry struct {
	ID    string `json:"id"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

type sessionValue struct {
	Answer  sessionAnswer `json:"answer"`
	Missing bool          `json:"missing,omitempty"`
}

type roomAnswer struct {
	State   room.State `json:"state"`
	Node    string     `json:"node,omitempty"`    // the node that ran it: the room's owner; "" outside cluster mode
	Address string     `json:"address,omitempty"` // the address that node advertises
}

type counterHits struct {
	Link string `json:"link"`
	N    int    `json:"n"`
}

func (a *app) defineMethods() error {
	m := &a.m
	var err error
	if m.limiter, err = limiter.Define(a.limits); err != nil {
		return err
	}
	if m.session, err = session.Define(a.sessions); err != nil {
		return err
	}
	if m.setValue, err = core.Define(a.sessions, "set_value", func(ctx context.Context, s *session.Session, e sessionEntry) (sessionAnswer, error) {
		ans := sessionAnswer{ID: e.ID, Key: e.Key}
		if err := s.Set(ctx, e.Key, []byte(e.Value)); err != nil {
			return ans, err
		}
		ans.Value = &e.Value
		err := deadlineInto(ctx, s, &ans)
		return ans, err
	}); err != nil {
		return err
	}
	if m.getValue, err = core.Define(a.sessions, "get_value", func(ctx context.Context, s *session.Session, e sessionEntry) (sessionValue, error) {
		ans := sessionAnswer{ID: e.ID, Key: e.Key}
		v, err := s.Get(ctx, e.Key)
		if errors.Is(err, session.ErrNotFound) {
			return sessionValue{Answer: ans, Missing: true}, nil
		}
		if err != nil {
			return sessionValue{}, err
		}
		str := string(v)
		ans.Value = &str
		err = deadlineInto(ctx, s, &ans)
		return sessionValue{Answer: ans}, err
	}); err != nil {
		return err
	}
	if m.record, err = core.Define(a.counters, "record_n", func(ctx context.Context, c *counter.Counter, h counterHits) (counterAnswer, error) {
		ans := counterAnswer{Link: h.Link, Recorded: h.N}
		for range h.N {
			if err := c.Record(ctx); err != nil {
				return ans, err
			}
		}
		err := counterInto(ctx, c, &ans)
		return ans, err
	}); err != nil {
		return err
	}
	if m.counted, err = core.Define(a.counters, "counted", func(ctx context.Context, c *counter.Counter, link string) (counterAnswer, error) {
		ans := counterAnswer{Link: link}
		if err := counterInto(ctx, c, &ans); err != nil {
			return ans, err
		}
		counts, err := a.store.Counts(ctx, link)
		for _, c := range counts {
			ans.Flushed = append(ans.Flushed, bucketCount{Bucket: c.Bucket.UnixMilli(), Count: c.N})
		}
		return ans, err
	}); err != nil {
		return err
	}
	m.roomState, err = core.Define(a.rooms, "state", func(ctx context.Context, r *room.Room, _ struct{}) (roomAnswer, error) {
		st, err := r.State()
		node, addr := a.self()
		return roomAnswer{State: st, Node: node, Address: addr}, err
	})
	return err
}

// self returns this node's name and the address it advertises, "" outside
// cluster mode.
func (a *app) self() (node, address string) {
	cs := a.rt.Stats().Cluster
	for _, m := range cs.Nodes {
		if m.Name == cs.Node {
			return cs.Node, m.Address
		}
	}
	return cs.Node, ""
}
