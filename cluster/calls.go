package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/replog"
)

// Calls between nodes are plain NATS request-reply: a node is served on one subject,
// "<prefix>.call.<node>" (the node's name encoded as one token), with one subscription for all of
// its objects; a request's reply comes on the connection's reply subject. Like the beacon, it needs
// no JetStream leader and no quorum, only the routes between the servers.

var _ replog.Calls = (*Engine)(nil)

// callHeader marks a reply the transport could not carry: its handler's was over the payload.
const callHeader = "Durable-Call-Error"

// callRoom is what a request or reply leaves of the connection's maximum payload for the subject
// and headers.
const callRoom = 8 << 10

func (e *Engine) callSubject(node string) (string, error) {
	enc, err := encodeKey(node)
	if err != nil {
		return "", fmt.Errorf("cluster: node name: %w", err)
	}
	return e.cfg.Prefix + ".call." + enc, nil
}

// MaxCallBytes implements replog.Calls: the connection's maximum payload less room for the
// subject and headers.
func (e *Engine) MaxCallBytes() int { return int(e.nc.MaxPayload()) - callRoom }

// Serve implements replog.Calls. Each request is handled on a goroutine of its own; stop
// unsubscribes, cancels the handlers' context and waits for them.
func (e *Engine) Serve(node string, handle func(ctx context.Context, req []byte) []byte) (func(), error) {
	subj, err := e.callSubject(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex // guards stopped and the Add of running
		stopped  bool
		running  sync.WaitGroup
		maxBytes = e.MaxCallBytes()
	)
	sub, err := e.nc.Subscribe(subj, func(m *nats.Msg) {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		running.Add(1)
		mu.Unlock()
		go func() {
			defer running.Done()
			reply := handle(ctx, m.Data)
			out := &nats.Msg{Subject: m.Reply, Data: reply}
			if len(reply) > maxBytes {
				out.Data, out.Header = nil, nats.Header{}
				out.Header.Set(callHeader, fmt.Sprintf("a reply of %d bytes: at most %d", len(reply), maxBytes))
			}
			_ = m.RespondMsg(out) // a reply that cannot be sent is one that did not come
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: serve calls: %w", err)
	}
	// The server knows of the subscription once the flush returns.
	_ = e.nc.FlushTimeout(e.cfg.AttemptTimeout)
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			_ = e.nc.FlushTimeout(e.cfg.AttemptTimeout) // the server forgets the subscription
			mu.Lock()
			stopped = true
			mu.Unlock()
			cancel()
		})
		running.Wait()
	}, nil
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
	m, err := e.nc.RequestWithContext(ctx, subj, req)
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
