// Package counter is exercise 4 of the workshop: the original's LinkCounter,
// a debounced flush (SEMANTICS A4, K1-K4). One object per link counts its
// hits in per-minute buckets in its own database and flushes them to a
// shared analytics store (a Sink) at most once per FlushAfter, however
// many hits arrive.
//
// Fill in the TODOs, then check your answer:
//
//	go test -tags exercises ./exercises/counter
//
// The rules the tests check:
//
//   - Debounce: Record arms the alarm only when none is pending. Re-arming
//     on every hit would postpone the flush for as long as hits keep coming.
//   - Absolute values: a flush sends each bucket's whole count, never the
//     hits since the last flush, so that a flush that is retried, or runs
//     twice, writes the same numbers (delivery is at least once).
//   - Flags, not deletes: mark what was sent as flushed; keep the rows, a
//     retry still needs them, and a later hit in the same minute makes the
//     bucket unflushed again.
//   - The flush calls the sink with the input gate open (State.Await), so
//     hits keep being recorded meanwhile: after the await, mark as flushed
//     only the buckets that still hold what was sent.
//   - A failed flush returns its error: the runtime retries it.
//
// The reference solution is package patterns/counter; the tests run
// against it with -tags 'exercises solution'.
package counter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
)

// DefaultFlushAfter is how long after the first unflushed hit the flush
// runs.
const DefaultFlushAfter = 30 * time.Second

var errTODO = errors.New("counter: not implemented yet (see the TODO)")

// A Sink receives a counter's flushes. Write stores each bucket's ABSOLUTE
// count for the link, replacing what it held for that (link, bucket).
type Sink interface {
	Write(ctx context.Context, link string, counts []Count) error
}

// Count is one bucket of a link's hits: N hits in the minute that starts
// at Bucket (UTC).
type Count struct {
	Bucket time.Time
	N      int64
}

// Options configure Counter objects.
type Options struct {
	Sink       Sink          // required
	FlushAfter time.Duration // default DefaultFlushAfter
	Logger     *slog.Logger  // for the original's alarm_failed record; default slog.Default()
}

// Counter counts the hits on one link, the object's name.
type Counter struct {
	st         *core.State
	sink       Sink
	flushAfter time.Duration
	log        *slog.Logger
}

// New is the Counter constructor with these options, for core.Register.
func (o Options) New(ctx context.Context, st *core.State) (*Counter, error) {
	if o.Sink == nil {
		return nil, errors.New("counter: Options.Sink is nil")
	}
	c := &Counter{st: st, sink: o.Sink, flushAfter: o.FlushAfter, log: o.Logger}
	if c.flushAfter <= 0 {
		c.flushAfter = DefaultFlushAfter
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	// TODO: create the table of buckets (the minute, its count, a flushed
	// flag) if it does not exist, with st.Storage().Exec(ctx, ...). Nothing
	// else: no SetAlarm here (A16).
	return c, nil
}

// Record counts one hit in the current minute's bucket
// (c.st.Now().Truncate(time.Minute): the runtime's clock, never time.Now)
// and makes sure a flush is due within FlushAfter.
func (c *Counter) Record(ctx context.Context) error {
	// TODO: bump the bucket (and clear its flushed flag); arm the alarm
	// only if none is pending (c.st.GetAlarm(ctx), c.st.SetAlarm(ctx, t)).
	return errTODO
}

// Total returns the hits recorded, flushed or not.
func (c *Counter) Total(ctx context.Context) (int64, error) {
	// TODO
	return 0, errTODO
}

// FlushAt returns when the next flush is due, and false if none is.
func (c *Counter) FlushAt(ctx context.Context) (time.Time, bool, error) {
	// TODO
	return time.Time{}, false, errTODO
}

// Alarm flushes the buckets that changed since the last flush.
func (c *Counter) Alarm(ctx context.Context, info core.AlarmInfo) error {
	// TODO: read the unflushed buckets into memory; write them to the sink
	// inside c.st.Await (the gate opens; storage needs the outer ctx again
	// after it returns); then mark as flushed the buckets whose count is
	// still what was sent. On failure, log the original's
	// record {event: "alarm_failed", do, retryCount, lastAttempt, error}
	// and return the error.
	return errTODO
}
