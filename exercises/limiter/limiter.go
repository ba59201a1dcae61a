// Package limiter is exercise 2 of the workshop: the sliding-window rate
// limiter (the original, SEMANTICS L1-L2). One object per key (a user, an IP
// address, an API token) remembers when it let calls through during the
// last window.
//
// Fill in the TODOs, then check your answer:
//
//	go test -tags exercises ./exercises/limiter
//
// The original's algorithm, all in one turn of the key's object:
//
//	DELETE FROM w WHERE ts <= now - window   -- forget the calls that left the window
//	SELECT count(*) FROM w                   -- count the rest
//	refuse if count >= limit, else INSERT INTO w VALUES (now)
//
// With window 60 s and limit 5, seven calls in a row: the first five pass,
// the last two are refused. Take the time from the now argument, never
// from SQL: a test passes the time it wants.
//
// The reference solution is package patterns/limiter; the tests run
// against it with -tags 'exercises solution'.
package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/core"
)

// ErrInvalidLimit is returned, wrapped, for a limit below 1 or a window
// that is not positive.
var ErrInvalidLimit = errors.New("limiter: invalid limit")

var errTODO = errors.New("limiter: not implemented yet (see the TODO)")

// Limiter is the sliding window of one key. Its methods run as turns of
// the key's object (core.Call).
type Limiter struct {
	st *core.State
}

// New is the constructor to pass to core.Register. It runs as the
// object's first turn; ctx is that turn's.
func New(ctx context.Context, st *core.State) (*Limiter, error) {
	// TODO: create the table of allowed calls (one row per call, its time)
	// if it does not exist (st.Storage().Exec(ctx, ...)).
	return &Limiter{st: st}, nil
}

// Decision is the answer to one check.
type Decision struct {
	Allowed    bool          // the call may go ahead; it is counted in the window
	Limit      int           // the limit the call was checked against
	Remaining  int           // how many more calls the window allows now
	ResetAt    time.Time     // when the oldest call counted leaves the window: its time plus the window
	RetryAfter time.Duration // zero while Remaining > 0, else ResetAt minus now
}

// Allow is AllowAt(ctx, now, limit, window) with now from the runtime's
// clock (l.st.Now(), which is core.Options.Now).
func (l *Limiter) Allow(ctx context.Context, limit int, window time.Duration) (Decision, error) {
	return l.AllowAt(ctx, l.st.Now(), limit, window)
}

// AllowAt checks a call made at now against limit calls per sliding
// window, and counts it if it is allowed. A call made at t counts against
// calls made before t+window, not against one made at t+window.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, limit int, window time.Duration) (Decision, error) {
	// TODO: check limit and window (ErrInvalidLimit); forget the calls at
	// or before now-window; count; record this call if under the limit; fill
	// in the whole Decision.
	return Decision{}, errTODO
}
