package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// errSilent is an attempt given up because its node stopped beating while it waited for the
// answer.
var errSilent = errors.New("the node stopped beating while the call waited for its answer")

// send sends one attempt of a call to node. With watch, the attempt is given up (errSilent, with
// replog.ErrNoReply) as soon as node stops beating: the call is then sent again at once, with the
// same id, which a node killed while it ran the call cannot take (the call fails at once with
// ErrCommitUnknown), and a node paused while it ran it answers as it would have.
func (ro *router) send(ctx context.Context, node string, req []byte, watch bool) ([]byte, error) {
	actx, cancel := context.WithTimeout(ctx, ro.opts.timeout)
	defer cancel()
	if !watch {
		return ro.calls.Send(actx, node, req)
	}
	var silent atomic.Bool
	watched := make(chan struct{})
	go func() { // owned by send, which waits for it
		defer close(watched)
		t := time.NewTicker(ro.rt.cluster.LeaseTTL() / 8)
		defer t.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-t.C:
				if ro.rt.cluster.Silent(node) {
					silent.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	reply, err := ro.calls.Send(actx, node, req)
	cancel()
	<-watched
	if err != nil && silent.Load() && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %w", errSilent, err)
	}
	return reply, err
}
