package limiter

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/core"
)

// ErrInvalidLimit is returned by Allow and AllowAt for a limit below 1 or a
// window that is not positive.
var ErrInvalidLimit = errors.New("limiter: invalid limit")

// Limiter is the sliding window of one key: the times of the calls it
// allowed during the last window. Its methods are meant to run as turns of
// the key's object, through core.Call, and take the turn's context. Turns
// never overlap, so a Limiter needs no lock.
type Limiter struct {
	st *core.State
}

// migrations is the window's schema, in order. Step 1 is what the
// constructor ran before it used migrations; step 2 came later, and runs
// once on every key's object, old or new, at its next activation.
var migrations = []core.Migration{
	core.SQL("CREATE TABLE IF NOT EXISTS w(ts INTEGER)"),
	core.SQL("CREATE INDEX w_ts ON w(ts)"), // the window's DELETE and count by time
}

// New is the constructor to pass to core.Register: it brings the key's
// schema up to date.
func New(ctx context.Context, st *core.State) (*Limiter, error) {
	if err := st.Storage().Migrate(ctx, migrations...); err != nil {
		return nil, err
	}
	return &Limiter{st: st}, nil
}

// Decision is the answer to one check.
type Decision struct {
	// Allowed reports whether the call may go ahead. An allowed call is
	// counted in the window; a refused one is not.
	Allowed bool

	// Limit is the limit the call was checked against.
	Limit int

	// Remaining is how many more calls the window allows now.
	Remaining int

	// ResetAt is when the oldest call counted in the window leaves it,
	// which frees one call: its time plus the window.
	ResetAt time.Time

	// RetryAfter is how long after this call the next one would be
	// allowed: zero while Remaining is above zero, else ResetAt minus the
	// time of this call.
	RetryAfter time.Duration
}

// Allow is AllowAt(ctx, now, limit, window) with now from the runtime's
// clock (core.State.Now, which is core.Options.Now).
func (l *Limiter) Allow(ctx context.Context, limit int, window time.Duration) (Decision, error) {
	return l.AllowAt(ctx, l.st.Now(), limit, window)
}

// AllowAt checks a call made at now against a limit of limit calls per
// sliding window of length window, and counts it if it is allowed. A call
// stays in the window for exactly window: one made at t counts against
// calls made before t+window, not against one made at t+window. A key's
// calls are expected in the order of their times, as when now is read in
// the turn (Allow does): a call older than one already counted is judged
// against a window that call has already trimmed.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, limit int, window time.Duration) (Decision, error) {
	if limit < 1 || window <= 0 {
		return Decision{}, fmt.Errorf("%w: %d calls per %v (want at least 1 per positive window)", ErrInvalidLimit, limit, window)
	}
	db := l.st.Storage()
	t := now.UnixNano()
	// "<=", where the original has "<": a call made exactly at ResetAt passes.
	if _, err := db.Exec(ctx, "DELETE FROM w WHERE ts <= ?", t-int64(window)); err != nil {
		return Decision{}, err
	}
	var n int
	var oldest sql.NullInt64
	if err := db.QueryRow(ctx, "SELECT count(*), min(ts) FROM w").Scan(&n, &oldest); err != nil {
		return Decision{}, err
	}
	d := Decision{Limit: limit}
	if n < limit {
		if _, err := db.Exec(ctx, "INSERT INTO w VALUES (?)", t); err != nil {
			return Decision{}, err
		}
		d.Allowed = true
		n++
		if !oldest.Valid {
			oldest.Int64 = t
		}
	}
	d.Remaining = max(limit-n, 0)
	d.ResetAt = time.Unix(0, oldest.Int64+int64(window))
	if d.Remaining == 0 {
		d.RetryAfter = d.ResetAt.Sub(now)
	}
	return d, nil
}
