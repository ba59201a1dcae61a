package cluster

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// requests sends an engine's calls to other nodes and takes their replies: NATS request-reply as
// nats.go's Request makes it (one subscription for the replies to every request, each request's
// reply subject naming it by a number), but with the requests ready at once published together
// (sendQueue).
//
// Its zero value is ready: its first request subscribes.
type requests struct {
	out sendQueue[*request] // the requests to publish

	mu      sync.Mutex // guards the fields below
	nc      *nats.Conn // the connection subscribed on, set with sub
	sub     *nats.Subscription
	inbox   string // the replies' subject less the request's number: "<inbox>."
	next    uint64
	waiting map[uint64]*request // by number: requests queued or sent, whose reply has not come
}

// request is one request of requests': its message, and where its reply (or the error of its
// publication) is delivered.
type request struct {
	id    uint64
	msg   nats.Msg
	reply chan *nats.Msg // one message: the reply; nil if the request could not be published (err)
	err   error          // set before nil is sent on reply
	gone  atomic.Bool    // its caller stopped waiting: if it is not published yet, it is not
}

// subscribe makes the subscription for the replies on nc, once; r.mu is held. It lasts as long as
// the connection, as nats.go's own for Request does: its goroutine ends when the connection closes.
func (r *requests) subscribe(nc *nats.Conn) error {
	if r.sub != nil {
		return nil
	}
	inbox := nc.NewInbox() + "."
	sub, err := nc.Subscribe(inbox+"*", r.deliver)
	if err != nil {
		return err
	}
	r.nc, r.sub, r.inbox, r.waiting = nc, sub, inbox, map[uint64]*request{}
	return nil
}

// deliver hands a reply to the request its subject names; one that names none (its caller stopped
// waiting) is dropped.
func (r *requests) deliver(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, r.inbox), 36, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	q := r.waiting[id]
	delete(r.waiting, id)
	r.mu.Unlock()
	if q != nil {
		q.reply <- m // never blocks: its only message
	}
}

// do publishes data on subject over nc (the same connection every time) and returns its reply, or
// why it has none: ctx's error if ctx ended first, the error of its publication, or
// nats.ErrNoResponders.
func (r *requests) do(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := r.enqueue(nc, subject, data)
	if err != nil {
		return nil, err
	}
	if r.out.add(q) {
		r.out.yield()
		r.publish()
	}
	return r.wait(ctx, q)
}

// enqueue makes a request, waiting for its reply.
func (r *requests) enqueue(nc *nats.Conn, subject string, data []byte) (*request, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.subscribe(nc); err != nil {
		return nil, err
	}
	r.next++
	q := &request{id: r.next, reply: make(chan *nats.Msg, 1)}
	q.msg = nats.Msg{Subject: subject, Reply: r.inbox + strconv.FormatUint(q.id, 36), Data: data}
	r.waiting[q.id] = q
	return q, nil
}

// wait waits for q's reply until ctx ends.
func (r *requests) wait(ctx context.Context, q *request) (*nats.Msg, error) {
	select {
	case m := <-q.reply:
		if m == nil {
			return nil, q.err
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" { // nats.go's no responders
			return nil, nats.ErrNoResponders
		}
		return m, nil
	case <-ctx.Done():
		q.gone.Store(true)
		r.mu.Lock()
		delete(r.waiting, q.id)
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

// publish publishes the queued requests until none is left; the caller is the queue's sender.
func (r *requests) publish() {
	for qs := r.out.take(); qs != nil; qs = r.out.take() {
		for _, q := range qs {
			if q.gone.Load() {
				continue
			}
			if err := r.nc.PublishMsg(&q.msg); err != nil {
				r.mu.Lock()
				_, waits := r.waiting[q.id]
				delete(r.waiting, q.id)
				r.mu.Unlock()
				if waits {
					q.err = err
					q.reply <- nil
				}
			}
		}
	}
}
