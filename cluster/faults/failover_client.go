package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/durable-go/durable/replog"
)

// router sends each key's operations to the node that serves the key, as a client of a cluster
// does: it remembers, per key, the node that last answered; a refusal that names the owner sends
// the operation there at once; a refusal that names no other node, a node that is down, or an
// attempt whose outcome is unknown (a timeout, a broken connection) sends it to the next node,
// after a pause. Resending a write is safe: it carries the version it expects, so a write that
// was stored already comes back as a conflict.
type router struct {
	names   []string // the nodes' names, by index
	nodes   []*RuntimeClient
	attempt time.Duration // bounds one attempt
	pause   time.Duration // before an attempt that was not sent on by a refusal naming the owner

	mu    sync.Mutex
	guess map[string]int // key -> the node that last answered for it

	// traced, if set, is told of every attempt (FailoverConfig.Trace).
	traced func(key string, a attempt)
}

func newRouter(names []string, nodes []*RuntimeClient, attempt, pause time.Duration) *router {
	return &router{names: names, nodes: nodes, attempt: attempt, pause: pause, guess: map[string]int{}}
}

func (r *router) index(name string) int {
	for i, n := range r.names {
		if n == name {
			return i
		}
	}
	return -1
}

// attempt is one operation sent to one node, and what came of it.
type attempt struct {
	node       int
	start, end time.Time
	reply      regReply
	err        error
}

// routeStats counts what a routed operation met on its way.
type routeStats struct {
	attempts, redirects, unknown int
}

// do sends the operation to the key's node, and on until a node answers it (ok, or for a write a
// conflict) or ctx ends; it returns the attempt that was answered, or ctx's error with the last
// attempt's.
func (r *router) do(ctx context.Context, key, method, path string, q url.Values) (attempt, routeStats, error) {
	var st routeStats
	r.mu.Lock()
	node, ok := r.guess[key]
	r.mu.Unlock()
	if !ok {
		node = 0
	}
	var last attempt
	redirected := true // the first attempt goes at once
	for {
		if !redirected {
			select {
			case <-ctx.Done():
				return last, st, fmt.Errorf("faults: %s %s of %q: %w (last attempt at %s: %v)", method, path, key, ctx.Err(), r.names[last.node], last.err)
			case <-time.After(r.pause):
			}
		}
		if ctx.Err() != nil {
			return last, st, fmt.Errorf("faults: %s %s of %q: %w (last attempt at %s: %v)", method, path, key, ctx.Err(), r.names[last.node], last.err)
		}
		actx, cancel := context.WithTimeout(ctx, r.attempt)
		a := attempt{node: node, start: time.Now()}
		a.reply, a.err = r.nodes[node].call(actx, method, path, q)
		a.end = time.Now()
		cancel()
		st.attempts++
		last = a
		if r.traced != nil {
			r.traced(key, a)
		}
		switch {
		case a.err == nil || errors.Is(a.err, replog.ErrConflict):
			r.mu.Lock()
			r.guess[key] = node
			r.mu.Unlock()
			return a, st, nil
		case errors.Is(a.err, ErrRefused):
			if o := r.index(a.reply.Owner); o >= 0 && o != node {
				node, redirected = o, true
				st.redirects++
				continue
			}
		default:
			st.unknown++
		}
		node, redirected = (node+1)%len(r.nodes), false
	}
}

// callResult is what came of one write call of a writer.
type callResult struct {
	ok      bool      // acknowledged
	late    bool      // acknowledged by a read: an attempt whose outcome was unknown had stored it
	start   time.Time // the start of the attempt that was acknowledged
	end     time.Time // when the acknowledgement came
	node    int       // the node that acknowledged it
	version uint64
	stats   routeStats
	err     error // why it failed (not acknowledged within its budget), or what it found wrong
	anomaly bool  // err is a broken promise: an acknowledged write lost, or a value nobody wrote
}

// writer writes one key, alone, each write expecting the version the last one made: so a conflict
// means that an attempt whose outcome was unknown stored the write (the writer reads the key to
// see its value there), and a version lower than one acknowledged means an acknowledged write was
// lost.
type writer struct {
	r      *router
	key    string
	budget time.Duration // a call that is not acknowledged within it fails

	n       int
	version uint64   // the key's version as last known
	acked   uint64   // the highest version acknowledged to this writer
	pending []string // values of failed calls that may have been stored
}

// write makes one call: a new value, expecting the version the writer knows, sent and resent
// through the router until it is acknowledged, found stored, or the budget is spent.
func (w *writer) write(ctx context.Context) callResult {
	w.n++
	value := fmt.Sprintf("%s-%d", objectName(w.key), w.n)
	ctx, cancel := context.WithTimeout(ctx, w.budget)
	defer cancel()
	var res callResult
	for {
		expect := w.version
		q := url.Values{"key": {objectName(w.key)}, "expect": {strconv.FormatUint(expect, 10)}, "value": {value}}
		a, st, err := w.r.do(ctx, w.key, http.MethodPost, "/write", q)
		res.stats.attempts += st.attempts
		res.stats.redirects += st.redirects
		res.stats.unknown += st.unknown
		if err != nil {
			res.err = err
			w.unsure(value, res)
			return res
		}
		if a.err == nil {
			if a.reply.Version != expect+1 {
				return w.broken(res, fmt.Errorf("faults: %s: a write expecting version %d was acknowledged as version %d", w.key, expect, a.reply.Version))
			}
			w.version, w.acked, w.pending = a.reply.Version, a.reply.Version, nil
			res.ok, res.start, res.end, res.node, res.version = true, a.start, a.end, a.node, a.reply.Version
			return res
		}
		// A conflict: the key is at another version than expected, which only a write of this
		// writer whose outcome was unknown can have made.
		cur := a.reply.Version
		if cur < w.acked {
			return w.broken(res, fmt.Errorf("faults: %s: node %s is at version %d, below the acknowledged %d: an acknowledged write was lost", w.key, w.r.names[a.node], cur, w.acked))
		}
		ra, st, err := w.r.do(ctx, w.key, http.MethodGet, "/read", url.Values{"key": {objectName(w.key)}})
		res.stats.attempts += st.attempts
		if err != nil {
			res.err = err
			w.unsure(value, res)
			return res
		}
		switch v := ra.reply.Version; {
		case v < cur:
			return w.broken(res, fmt.Errorf("faults: %s: read version %d after a conflict at version %d", w.key, v, cur))
		case ra.reply.Value == value:
			w.version, w.acked, w.pending = v, v, nil
			res.ok, res.late, res.start, res.end, res.node, res.version = true, true, ra.start, ra.end, ra.node, v
			return res
		case slices.Contains(w.pending, ra.reply.Value):
			// A call that failed had stored its value after all: write again after it.
			w.version, w.acked, w.pending = v, v, nil
		default:
			return w.broken(res, fmt.Errorf("faults: %s: version %d holds %q, which this writer, its only one, did not write", w.key, v, ra.reply.Value))
		}
	}
}

// unsure remembers the value of a call that failed after an attempt whose outcome was unknown:
// the key may hold it.
func (w *writer) unsure(value string, res callResult) {
	if res.stats.unknown > 0 {
		w.pending = append(w.pending, value)
	}
}

func (w *writer) broken(res callResult, err error) callResult {
	res.err, res.anomaly = err, true
	return res
}
