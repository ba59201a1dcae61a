package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// gave the attempt up so. The asking is a timer's function, not a goroutine of the attempt's: a
// reply is returned as soon as it comes, without waiting for another goroutine to be scheduled and
// stop, and the timer is stopped before sendWatching returns (a function already started asks
// nothing and cancels nothing once the reply is in: watch.over).
func sendWatching(ctx context.Context, calls replog.Calls, node string, req []byte, timeout, period time.Duration, gone func() bool) ([]byte, bool, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := &watch{gone: gone, cancel: cancel, period: period}
	w.mu.Lock()
	w.t = time.AfterFunc(period, w.check)
	w.mu.Unlock()
	reply, err := calls.Send(actx, node, req)
	w.mu.Lock()
	w.over = true
	w.t.Stop()
	cut := w.cut
	w.mu.Unlock()
	return reply, cut, err
}

// watch asks, every period while an attempt waits for its reply, whether its node is gone, and
// cancels the attempt if so.
type watch struct {
	gone   func() bool
	cancel context.CancelFunc
	period time.Duration

	mu   sync.Mutex // guards the fields below
	t    *time.Timer
	over bool // the attempt has its answer: nothing more is asked
	cut  bool // the node was found gone: the attempt was canceled
}

func (w *watch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.over:
	case w.gone():
		w.cut = true
		w.cancel()
	default:
		w.t.Reset(w.period)
	}
}
