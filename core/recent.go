package core

import (
	"sync"
	"time"
)

// recentCalls is a node's memory of the calls other nodes sent it, by request id: those under way,
// and the replies of those that ran, so that a request sent again is answered with the first one's
// reply instead of running twice. It holds at most max replies, of at most recentBytes in all,
// each for at most ttl.
type recentCalls struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	byID  map[string]*recentCall
	order []*recentCall // by arrival, oldest first: what is forgotten first
	bytes int           // the replies' bytes held
}

// recentBytes bounds the replies a node remembers, in bytes: a reply may be megabytes long.
const recentBytes = 64 << 20

// recentCall is one request: under way until ready is closed, then its reply.
type recentCall struct {
	id    string
	at    time.Time
	ready chan struct{}
	reply []byte // set before ready is closed
	held  int    // the reply's bytes counted in recentCalls.bytes
}

func newRecentCalls(max int, ttl time.Duration, now func() time.Time) *recentCalls {
	return &recentCalls{max: max, ttl: ttl, now: now, byID: map[string]*recentCall{}}
}

// begin returns the request of id, and whether it is new: then the caller runs it and calls finish.
// An id of "" is never remembered.
func (r *recentCalls) begin(id string) (*recentCall, bool) {
	c := &recentCall{id: id, ready: make(chan struct{})}
	if id == "" {
		return c, true
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byID[id]; ok {
		return old, false
	}
	c.at = now
	r.byID[id] = c
	r.order = append(r.order, c)
	// Forget the oldest past the bound, and those past their time.
	drop := 0
	for drop < len(r.order) && (len(r.order)-drop > r.max || r.bytes > recentBytes || now.Sub(r.order[drop].at) > r.ttl) {
		if o := r.order[drop]; r.byID[o.id] == o {
			delete(r.byID, o.id)
			r.bytes -= o.held
		}
		r.order[drop] = nil
		drop++
	}
	if drop > 0 {
		r.order = r.order[drop:]
	}
	return c, true
}

// finish records c's reply. A request that did not run (ran false: refused before its turn) is
// forgotten, so that it runs when sent again.
func (r *recentCalls) finish(c *recentCall, reply []byte, ran bool) {
	c.reply = reply
	close(c.ready)
	if c.id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[c.id] != c {
		return // forgotten already
	}
	if !ran {
		delete(r.byID, c.id)
		return
	}
	c.held = len(reply)
	r.bytes += c.held
}
