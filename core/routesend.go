package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/replog"
)

// errSilent is an attempt given up because its node stopped beating while it waited for the
// answer.
var errSilent = errors.New("the node stopped beating while the call waited for its answer")

// send sends one attempt of a call to node. With watch, the attempt is given up (errSilent, with
// replog.ErrNoReply) as soon as node stops beating: the call is then sent again at once, with the
// same id, which a node killed while it ran the call cannot take (the call fails at once with
// ErrCommitUnknown), and a node paused while it ran it answers as it would have.
func (ro *router) send(ctx context.Context, node string, req []byte, watch bool) ([]byte, error) {
	if !watch {
		actx, cancel := context.WithTimeout(ctx, ro.opts.timeout)
		defer cancel()
		return ro.calls.Send(actx, node, req)
	}
	reply, gone, err := sendWatching(ctx, ro.calls, node, req, ro.opts.timeout, ro.rt.cluster.LeaseTTL()/8,
		func() bool { return ro.rt.cluster.Silent(node) })
	if err != nil && gone && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %w", errSilent, err)
	}
	return reply, err
}

// sendWatching sends req to node, waiting at most timeout for the reply, and gives the attempt up
// as soon as gone, asked every period while it waits, reports the node gone; it reports whether it
// gave the attempt up so.
func sendWatching(ctx context.Context, calls replog.Calls, node string, req []byte, timeout, period time.Duration, gone func() bool) ([]byte, bool, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cut atomic.Bool
	watched := make(chan struct{})
	go func() { // owned by sendWatching, which waits for it
		defer close(watched)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-t.C:
				if gone() {
					cut.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	reply, err := calls.Send(actx, node, req)
	cancel()
	<-watched
	return reply, cut.Load(), err
}
