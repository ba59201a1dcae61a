// Package counter is the original's LinkCounter: one object per link counts its
// hits in per-minute buckets in its own database and flushes them to a
// shared analytics store at most once per 30 s, however many hits arrive.
// The invariant is that the store converges to the object's exact counts:
// every flush writes each bucket's ABSOLUTE count, keyed by (link, bucket),
// so a flush that is retried, or runs twice, cannot inflate anything
// (SEMANTICS K1-K4, A4).
//
// Record bumps the current minute's bucket and arms the alarm only if no
// flush is pending. The alarm reads the unflushed buckets into memory,
// writes them to the Sink with the input gate open (core.State.Await),
// then marks them flushed. A failed flush is logged as the original's
// {event: "alarm_failed", do, retryCount, lastAttempt, error} record and
// returned, so the runtime retries it (2 s, 4 s, ... six times).
//
//	store, err := counter.OpenStore("analytics.sqlite")
//	ns, err := core.Register(rt, "counters", counter.Options{Sink: store}.New)
//	stub, err := ns.Get(linkID)
//	err = core.Do(ctx, stub, func(ctx context.Context, c *counter.Counter) error {
//		return c.Record(ctx)
//	})
//
// # Writes per bucket
//
// With a 30 s flush and one-minute buckets, steady traffic writes each
// bucket at most twice while its minute lasts, and once more after it ends
// (for the hits after its last flush in the minute): at most three writes,
// usually three. The original's "at most twice" (SEMANTICS K4) counts only the
// first two. Flushing less often, or keeping longer buckets, writes less.
//
// # Concurrency
//
// The flush writes to the sink with the object's input gate open: hits keep
// being recorded meanwhile, into the buckets already read. Those buckets are
// not marked flushed (the stored count no longer matches what was sent), and
// the hit that saw no pending alarm has armed the next flush, which sends
// them again. Only one flush runs at a time per object (SEMANTICS A9), so a
// sink never receives an older count after a newer one from the same
// object.
//
// # Persistence
//
// Buckets, flags and the pending flush live in the object's database: a
// flush due while the runtime was down runs when it starts again. Flushed
// rows are kept (one per minute per link); an application with long-lived
// links may delete flushed rows older than an hour.
//
// # Pitfalls
//
//   - Re-arming on every hit postpones the flush forever under steady
//     traffic: check that no alarm is pending first (SEMANTICS A4).
//   - Writing increments (count = count + ?) instead of absolute values
//     inflates the totals every time a flush is retried, and retries happen:
//     delivery is at least once (SEMANTICS K3).
//   - A constructor that arms the alarm unconditionally postpones the
//     pending flush each time the object is woken (SEMANTICS A16).
//   - Deleting the rows instead of flagging them leaves a retry with nothing
//     to send; flagging them with "WHERE flushed = 0" after the await marks
//     hits that arrived during it as sent, and they are never sent.
//   - Record must clear the flag (flushed = 0) when it bumps a bucket that
//     was already flushed, or the bucket's later hits are never sent.
//
// # From any node
//
// Define makes a counter's Record and Total methods callable on any node of a cluster
// (core.Define): at a node that does not own the counter they run at the one that does, where its
// flush alarm runs too.
package counter
