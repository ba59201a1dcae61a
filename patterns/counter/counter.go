package counter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
)

// DefaultFlushAfter is how long after the first unflushed hit the flush
// runs (SEMANTICS K1).
const DefaultFlushAfter = 30 * time.Second

// Options configure Counter objects.
type Options struct {
	// Sink receives the flushes; required. Usually a *Store.
	Sink Sink

	// FlushAfter is how long after the first unflushed hit the flush runs
	// (default DefaultFlushAfter).
	FlushAfter time.Duration

	// Logger receives a record (event=alarm_failed) each time a flush
	// fails (default slog.Default()).
	Logger *slog.Logger
}

// A Counter counts the hits on one link, the object's name, in per-minute
// buckets, and flushes them to a Sink in the background: at most one flush
// per FlushAfter, however many hits. Register it with
// core.Register(rt, "counters", counter.Options{Sink: store}.New), one
// object per link.
//
// Methods must be called inside a turn of the object (core.Call, core.Do),
// with the turn's ctx; elsewhere they fail with core.ErrNotInTurn.
type Counter struct {
	st         *core.State
	sink       Sink
	flushAfter time.Duration
	log        *slog.Logger
}

// clicks holds one row per minute. flushed is a flag, not a delete, so that
// a retried flush still has the data (K2); a hit after a flush clears it.
// Step 1 is what the constructor ran before it used migrations.
var migrations = []core.Migration{
	core.SQL(`CREATE TABLE IF NOT EXISTS clicks(
  bucket INTEGER PRIMARY KEY, -- unix ms of the minute
  n INTEGER NOT NULL,
  flushed INTEGER NOT NULL DEFAULT 0
)`),
}

// New is the Counter constructor with these options, for core.Register.
func (o Options) New(ctx context.Context, st *core.State) (*Counter, error) {
	if o.Sink == nil {
		return nil, errors.New("counter: Options.Sink is nil")
	}
	// Tables only. The constructor runs on every activation, so arming the
	// alarm here would postpone a pending flush each time (A16).
	if err := st.Storage().Migrate(ctx, migrations...); err != nil {
		return nil, err
	}
	c := &Counter{st: st, sink: o.Sink, flushAfter: o.FlushAfter, log: o.Logger}
	if c.flushAfter <= 0 {
		c.flushAfter = DefaultFlushAfter
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Record counts one hit in the current minute's bucket, by the runtime's
// clock (State.Now), and makes sure a flush is due within FlushAfter.
func (c *Counter) Record(ctx context.Context) error {
	now := c.st.Now()
	bucket := now.Truncate(time.Minute).UnixMilli()
	_, err := c.st.Storage().Exec(ctx, `INSERT INTO clicks(bucket, n) VALUES (?, 1)
ON CONFLICT(bucket) DO UPDATE SET n = n + 1, flushed = 0`, bucket)
	if err != nil {
		return err
	}
	// Debounce: arm only when no flush is pending (A4). Re-arming on every
	// hit would postpone the flush for as long as the hits keep coming.
	if _, pending, err := c.st.GetAlarm(ctx); err != nil || pending {
		return err
	}
	return c.st.SetAlarm(ctx, now.Add(c.flushAfter))
}

// Total returns the hits this counter has recorded, flushed or not.
func (c *Counter) Total(ctx context.Context) (int64, error) {
	var n int64
	err := c.st.Storage().QueryRow(ctx, "SELECT coalesce(sum(n), 0) FROM clicks").Scan(&n)
	return n, err
}

// FlushAt returns when the next flush is due, and false if none is.
func (c *Counter) FlushAt(ctx context.Context) (time.Time, bool, error) {
	return c.st.GetAlarm(ctx)
}

// Alarm flushes the buckets that changed since the last flush. On failure
// it logs the original's alarm_failed record and returns the error, so that the
// runtime retries; the record with lastAttempt=true is the one to alert on.
func (c *Counter) Alarm(ctx context.Context, info core.AlarmInfo) error {
	if err := c.flush(ctx); err != nil {
		level := slog.LevelWarn
		if info.LastAttempt() {
			level = slog.LevelError
		}
		c.log.LogAttrs(ctx, level, "counter flush failed",
			slog.String("event", "alarm_failed"),
			slog.String("do", c.st.Name()),
			slog.Int("retryCount", info.RetryCount),
			slog.Bool("lastAttempt", info.LastAttempt()),
			slog.Any("error", err),
		)
		return err
	}
	return nil
}

// flush sends the unflushed buckets to the sink as absolute counts and
// marks them flushed.
func (c *Counter) flush(ctx context.Context) error {
	// Read the rows into memory before any await (K2): the sink is written
	// with the input gate open, and other turns may record meanwhile.
	counts, err := c.unflushed(ctx)
	if err != nil || len(counts) == 0 {
		return err
	}
	link := c.st.Name()
	err = c.st.Await(ctx, func(ctx context.Context) error {
		return c.sink.Write(ctx, link, counts)
	})
	if err != nil {
		return err
	}
	// Mark only the rows still holding what was sent: a hit recorded during
	// the await changed n, so its bucket stays unflushed for the next flush
	// (which that hit armed).
	for _, cnt := range counts {
		_, err := c.st.Storage().Exec(ctx, "UPDATE clicks SET flushed = 1 WHERE bucket = ? AND n = ?", cnt.Bucket.UnixMilli(), cnt.N)
		if err != nil {
			return err
		}
	}
	return nil
}

// unflushed returns the buckets changed since they were last flushed.
func (c *Counter) unflushed(ctx context.Context) ([]Count, error) {
	rows, err := c.st.Storage().Query(ctx, "SELECT bucket, n FROM clicks WHERE flushed = 0 ORDER BY bucket")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var ms, n int64
		if err := rows.Scan(&ms, &n); err != nil {
			return nil, err
		}
		out = append(out, Count{Bucket: time.UnixMilli(ms).UTC(), N: n})
	}
	return out, rows.Err()
}
