package limiter

import (
	"context"
	"time"

	"github.com/durable-go/durable/core"
)

// Check is the argument of Methods.Allow: a limit of Limit calls per sliding window of Window.
type Check struct {
	Limit  int
	Window time.Duration
}

// Methods are a key's operations as methods callable on any node of a cluster (core.Define):
// called at a node that does not own the key's object, each runs at the node that does; in one
// process, or at the owner, it runs in place as core.Call does. Across nodes an error of the
// limiter's own is a *core.RemoteError carrying its message for which errors.Is(err,
// ErrInvalidLimit) holds as it does in one process.
type Methods struct {
	// Allow is Limiter.Allow: the time is the owner's clock.
	Allow func(ctx context.Context, key *core.Stub[*Limiter], c Check) (Decision, error)
}

// Define defines a key's methods on keys, once per namespace, on every node alike.
func Define(keys *core.Namespace[*Limiter]) (*Methods, error) {
	allow, err := core.Define(keys, "allow", func(ctx context.Context, l *Limiter, c Check) (Decision, error) {
		return l.Allow(ctx, c.Limit, c.Window)
	}, ErrInvalidLimit)
	if err != nil {
		return nil, err
	}
	return &Methods{Allow: allow}, nil
}
