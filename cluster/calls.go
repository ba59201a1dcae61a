package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/replog"
)

// Calls between nodes are plain NATS request-reply: a node is served on one subject,
// "<prefix>.call.<node>" (the node's name encoded as one token), with one subscription for all of
// its objects; a request's reply comes on the engine's reply subject, one subscription for all of
// them (requests.go). Requests ready at once, and replies, are written to the server together.
// Like the beacon, it needs no JetStream leader and no quorum, only the routes between the servers.

var _ replog.Calls = (*Engine)(nil)

// callHeader marks a reply the transport could not carry: its handler's was over the payload.
const callHeader = "Durable-Call-Error"

// callRoom is what a request or reply leaves of the connection's maximum payload for the subject
// and headers.
const callRoom = 8 << 10

// callSubject is the subject node is served on, remembered for the first maxCallSubjects nodes
// asked for (a cluster's nodes: every call names one).
func (e *Engine) callSubject(node string) (string, error) {
	if subj, ok := e.callSubjects.Load(node); ok {
		return subj.(string), nil
	}
	enc, err := encodeKey(node)
	if err != nil {
		return "", fmt.Errorf("cluster: node name: %w", err)
	}
	subj := e.cfg.Prefix + ".call." + enc
	if e.callSubjectsN.Add(1) <= maxCallSubjects {
		e.callSubjects.Store(node, subj)
	}
	return subj, nil
}

// maxCallSubjects bounds the call subjects an engine remembers.
const maxCallSubjects = 1024

// MaxCallBytes implements replog.Calls: the connection's maximum payload less room for the
// subject and headers.
func (e *Engine) MaxCallBytes() int { return int(e.nc.MaxPayload()) - callRoom }

// Serve implements replog.Calls. Requests run on goroutines that are used again (see callWorkers);
// stop unsubscribes, cancels the handlers' context and waits for them.
func (e *Engine) Serve(node string, handle func(ctx context.Context, req []byte) []byte) (func(), error) {
	subj, err := e.callSubject(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	maxBytes := e.MaxCallBytes()
	var out sendQueue[*nats.Msg] // the replies, sent together where they can be
	w := &callWorkers{ch: make(chan *nats.Msg, callBacklog), ctx: ctx, handle: func(m *nats.Msg) {
		reply := handle(ctx, m.Data)
		if m.Reply == "" {
			return // a request that asks for no reply
		}
		r := &nats.Msg{Subject: m.Reply, Data: reply}
		if len(reply) > maxBytes {
			r.Data, r.Header = nil, nats.Header{}
			r.Header.Set(callHeader, fmt.Sprintf("a reply of %d bytes: at most %d", len(reply), maxBytes))
		}
		if out.add(r) {
			out.yield()
			for rs := out.take(); rs != nil; rs = out.take() {
				for _, r := range rs {
					_ = e.nc.PublishMsg(r) // a reply that cannot be sent is one that did not come
				}
			}
		}
	}}
	w.mu.Lock()
	w.start()
	w.mu.Unlock()
	sub, err := e.nc.ChanSubscribe(subj, w.ch)
	if err != nil {
		w.stop(cancel)
		return nil, fmt.Errorf("cluster: serve calls: %w", err)
	}
	// The server knows of the subscription once the flush returns.
	_ = e.nc.FlushTimeout(e.cfg.AttemptTimeout)
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			_ = e.nc.FlushTimeout(e.cfg.AttemptTimeout) // the server forgets the subscription
		})
		w.stop(cancel)
	}, nil
}

// callBacklog is how many requests a node holds that no worker has taken yet; a request past it is
// dropped (the caller hears no reply, and asks again). Workers take requests as they come, so it
// fills only if goroutines cannot be started as fast as requests arrive.
const callBacklog = 1 << 16

// callIdle is how long a worker waits for a request before it exits, unless it is the only one
// waiting.
const callIdle = 10 * time.Second

// callWorkers runs a node's requests, each on a goroutine of its own, taken from the connection's
// delivery at once (a subscription with a channel: no goroutine between the connection's reader
// and the worker). A worker that takes a request starts another if none is left waiting, so a
// request never waits behind a running one (a call from A to B that calls A back needs a second
// worker on A); a worker that finishes waits for the next request, so that a busy node reuses
// goroutines whose stacks have grown (a turn's SQLite calls need deep ones) instead of growing a
// new one for each request.
type callWorkers struct {
	ch     chan *nats.Msg
	ctx    context.Context // canceled by stop: the workers exit, and the handlers' calls end
	handle func(*nats.Msg)

	mu      sync.Mutex // guards idle, stopped and the Add of running
	idle    int        // workers waiting for a request, or starting
	stopped bool
	running sync.WaitGroup
}

// start starts a worker, unless stop was called; w.mu is held.
func (w *callWorkers) start() {
	if w.stopped {
		return
	}
	w.idle++
	w.running.Add(1)
	go w.work()
}

func (w *callWorkers) work() {
	defer w.running.Done()
	t := time.NewTimer(callIdle)
	defer t.Stop()
	for {
		select {
		case m := <-w.ch:
			w.mu.Lock()
			if w.idle--; w.idle == 0 {
				w.start() // one waits for the next request while this one runs
			}
			w.mu.Unlock()
			w.handle(m)
			w.mu.Lock()
			w.idle++
			w.mu.Unlock()
		case <-t.C:
			w.mu.Lock()
			if w.idle > 1 {
				w.idle--
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		case <-w.ctx.Done():
			return
		}
		t.Reset(callIdle)
	}
}

// stop stops the workers (cancel cancels their context) and waits for them. Requests no worker
// took are dropped: their callers hear no reply.
func (w *callWorkers) stop(cancel context.CancelFunc) {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	cancel()
	w.running.Wait()
}

// Send implements replog.Calls: a NATS request on the node's subject. No responders (nobody
// serves the node, or the route to it is down) is replog.ErrUnreachable; a request whose reply
// did not come before ctx ended is replog.ErrNoReply.
func (e *Engine) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	if max := e.MaxCallBytes(); len(req) > max {
		return nil, fmt.Errorf("cluster: a request of %d bytes to node %q: at most %d: %w", len(req), node, max, replog.ErrCallTooLarge)
	}
	subj, err := e.callSubject(node)
	if err != nil {
		return nil, err
	}
	m, err := e.calls.do(ctx, e.nc, subj, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("cluster: request to node %q: %w", node, replog.ErrUnreachable)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("cluster: request to node %q: %w: %w", node, replog.ErrNoReply, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrConnectionDraining):
		return nil, fmt.Errorf("cluster: request to node %q: %w: %w", node, replog.ErrUnreachable, err)
	case err != nil:
		return nil, fmt.Errorf("cluster: request to node %q: %w: %w", node, replog.ErrNoReply, err)
	}
	if msg := m.Header.Get(callHeader); msg != "" {
		return nil, fmt.Errorf("cluster: request to node %q: %s: %w", node, msg, replog.ErrCallTooLarge)
	}
	return m.Data, nil
}
