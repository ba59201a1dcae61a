package cluster

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// replies holds the answers to one request of the engine's, sent to the reply subjects that
// subject matches, in the order they arrive and without a bound, until it is closed. A synchronous
// subscription would do the same, but nats.go gives each one a channel of 64 Ki messages
// (512 KiB, allocated and zeroed for every read and barrier); this one grows with what arrives.
type replies struct {
	sub   *nats.Subscription
	mu    sync.Mutex
	queue []*nats.Msg
	ready chan struct{} // a token when queue may have grown
}

// subscribeReplies subscribes to subject until the replies are closed. The subscription's
// goroutine (nats.go's) ends at close.
func (e *Engine) subscribeReplies(subject string) (*replies, error) {
	r := &replies{ready: make(chan struct{}, 1)}
	sub, err := e.nc.Subscribe(subject, func(m *nats.Msg) {
		r.mu.Lock()
		r.queue = append(r.queue, m)
		r.mu.Unlock()
		select {
		case r.ready <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// next returns the first answer not yet returned, waiting for one until ctx ends.
func (r *replies) next(ctx context.Context) (*nats.Msg, error) {
	for {
		r.mu.Lock()
		if len(r.queue) > 0 {
			m := r.queue[0]
			r.queue[0] = nil
			r.queue = r.queue[1:]
			r.mu.Unlock()
			return m, nil
		}
		r.mu.Unlock()
		select {
		case <-r.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// close ends the subscription; answers that arrive later are dropped.
func (r *replies) close() { _ = r.sub.Unsubscribe() }
