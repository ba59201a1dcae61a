package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/replog"
)

// The beacon is plain NATS: a beat is published on "<prefix>.beat", which no stream keeps, and
// every listener subscribes to it. It needs no JetStream leader and no quorum, only the routes
// between the servers.

func (e *Engine) beatSubject() string { return e.cfg.Prefix + ".beat" }

// Beat implements replog.Beacon.
func (e *Engine) Beat(ctx context.Context, msg []byte) error {
	if len(msg) > replog.MaxBeatBytes {
		return fmt.Errorf("cluster: beat of %d bytes: at most %d", len(msg), replog.MaxBeatBytes)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: beat: %w", err)
	}
	if err := e.nc.Publish(e.beatSubject(), msg); err != nil {
		return fmt.Errorf("cluster: beat: %w", err)
	}
	return nil
}

// beatBuffer is how many beats a listener holds while its fn runs; past that, beats are dropped
// (a beacon delivers at most once).
const beatBuffer = 256

// Listen implements replog.Beacon. Beats go through a buffered channel to a goroutine of the
// listener's own, which calls fn; stop unsubscribes, ends the goroutine and waits for it.
func (e *Engine) Listen(fn func(msg []byte)) (func(), error) {
	ch := make(chan *nats.Msg, beatBuffer)
	sub, err := e.nc.ChanSubscribe(e.beatSubject(), ch)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen: %w", err)
	}
	// The server knows of the subscription once the flush returns, so that a beat sent after
	// Listen returns reaches it; a connection that is down sends it again when it is back.
	_ = e.nc.FlushTimeout(e.cfg.AttemptTimeout)
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stopping:
				return
			case m := <-ch:
				select {
				case <-stopping: // stop was called while this beat waited: drop it
					return
				default:
				}
				fn(m.Data)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			close(stopping)
		})
		<-done
	}, nil
}
