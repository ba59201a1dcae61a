package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/durable-go/durable/core/internal/telemetry"
)

// Alarmer is implemented by objects that receive their alarm. The runtime calls Alarm as a turn of
// its own (atomic and output-gated like any other) when the time set with State.SetAlarm has come,
// activating the object first if it was evicted (constructor, then Alarm).
//
// Delivery is at least once: a run that returns an error, panics or overstays Options.AlarmTimeout
// is retried (see RetryPolicy), and a crash during a run means it runs again. Write Alarm so that a
// second run is harmless: store absolute values, not increments.
type Alarmer interface {
	Alarm(ctx context.Context, info AlarmInfo) error
}

// AlarmInfo describes one run of an alarm.
type AlarmInfo struct {
	RetryCount int       // 0 on the first run, then 1, 2, ...
	IsRetry    bool      // RetryCount > 0
	MaxRetries int       // the policy's limit: when RetryCount == MaxRetries this is the last run
	Scheduled  time.Time // the time the alarm was first set for
}

// LastAttempt reports whether a failure of this run drops the alarm (to the dead-letter table)
// instead of retrying it.
func (i AlarmInfo) LastAttempt() bool { return i.RetryCount >= i.MaxRetries }

// RetryPolicy says when a failed alarm runs again. The zero value is the original runtime's policy:
// 2 s, then doubling, at most 6 retries (7 runs in all, 126 s of delays), each delay lengthened by
// up to 25% at random so that many failing alarms do not retry in lock-step.
type RetryPolicy struct {
	FirstDelay time.Duration // default 2 s
	Factor     float64       // default 2
	MaxRetries int           // default 6; negative means no retries
	Jitter     float64       // extra fraction of each delay, at random in [0, Jitter); default 0.25, negative for none
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	orDefault(&p.FirstDelay, 2*time.Second)
	if p.Factor < 1 {
		p.Factor = 2
	}
	// Zero means the default, negative means none.
	p.MaxRetries = max(cmp.Or(p.MaxRetries, 6), 0)
	p.Jitter = max(cmp.Or(p.Jitter, 0.25), 0)
	return p
}

// delay returns the wait before retry number n (1-based).
func (p RetryPolicy) delay(n int) time.Duration {
	d := float64(p.FirstDelay) * math.Pow(p.Factor, float64(n-1))
	if p.Jitter > 0 {
		d += d * p.Jitter * rand.Float64()
	}
	return time.Duration(min(d, float64(365*24*time.Hour)))
}

// maxAlarmTime is the latest time an alarm can be set for.
var maxAlarmTime = time.Unix(0, math.MaxInt64).Add(-365 * 24 * time.Hour)

// SetAlarm sets the object's one alarm to t, replacing any alarm pending (SEMANTICS A1). A time in
// the past fires at once; a time at or before the Unix epoch (UnixMilli <= 0: the zero Time, say)
// is refused with ErrInvalidArgument, as the original refuses it (W5). It is part of the turn: it
// takes effect when the turn commits, and it counts as one row written. The object must implement
// Alarmer. The time keeps its full precision (the original drops fractions of a millisecond).
func (st *State) SetAlarm(ctx context.Context, t time.Time) error {
	o := st.o
	tu, err := o.inTurn(ctx)
	switch {
	case err != nil:
		return err
	case t.UnixMilli() <= 0:
		return fmt.Errorf("%w: SetAlarm cannot be called with a time at or before the Unix epoch (%v, %d ms)", ErrInvalidArgument, t, t.UnixMilli())
	case t.After(maxAlarmTime):
		return fmt.Errorf("core: SetAlarm: %v is too far in the future", t)
	case !o.ns.alarms:
		return fmt.Errorf("core: SetAlarm: %s objects do not implement core.Alarmer", o.ns.name)
	}
	at := t.UnixNano()
	if err := tu.timerTable(func(h *turn, owner string) error {
		return h.putTimer(timerRow{owner: owner, at: at, first: at})
	}); err != nil {
		return fmt.Errorf("core: SetAlarm: %w", err)
	}
	if r := o.alarmRun; r != nil && r.t == tu && r.isAlarm {
		r.setDuring = &at
	}
	return nil
}

// GetAlarm returns the pending alarm's time, and false if none is set. While Alarm runs, the alarm
// being run is no longer pending (A13). While retries of a failed run are pending it returns the
// time the alarm was set for, not the next retry's, as the original does (W1); the retry's own time
// is the runtime's.
func (st *State) GetAlarm(ctx context.Context) (at time.Time, ok bool, err error) {
	err = st.onTimers(ctx, func(h *turn, owner string) error {
		r, found, err := h.getTimer(owner, "")
		if found && !r.running {
			at, ok = time.Unix(0, r.first), true
		}
		return err
	})
	return at, ok, err
}

// DeleteAlarm cancels the pending alarm, including a retry waiting to run.
func (st *State) DeleteAlarm(ctx context.Context) error {
	return st.onTimers(ctx, func(h *turn, owner string) error {
		_, err := h.delTimers(owner, "", false)
		return err
	})
}

// alarmChange is the object's earliest timer, as committed.
type alarmChange struct {
	at  int64 // unix ns
	del bool  // no timer left
}

// alarmRun is the state of a run of due timers in progress.
type alarmRun struct {
	t         *turn
	isAlarm   bool          // it runs the Alarm handler now
	setDuring *int64        // SetAlarm called by the Alarm handler (A14)
	done      chan struct{} // closed when the run is over
}

// runTimers delivers the object's due timers (its alarm, its schedule entries, its facets' timers),
// one after the other, each in segments of its own with its own retry state, so that a failing one
// never delays the others. A run already under way (inside an Await) runs whatever is due when it
// gets there: one run at a time (A9).
// A fire from the scheduler leaves it to a run under way; TriggerAlarm (wait) waits for it, unless
// it is the run that calls.
func (o *object) runTimers(ctx context.Context, wait bool) error {
	for {
		if !wait && o.alarmBusy.Load() { // the run under way looks again when it ends
			o.alarmAgain.Store(true)
			return nil
		}
		var busy *alarmRun
		err := o.runTurn(&turn{Context: ctx, o: o}, nil, true, func(t *turn) error {
			if busy = o.alarmRun; busy == nil {
				return o.runDue(t)
			}
			o.alarmAgain.Store(true)
			return nil
		})
		if busy == nil || err != nil || !wait || callerOf(ctx).chain(busy.t) {
			return err
		}
		<-busy.done
	}
}

// runDue is runTimers' turn.
func (o *object) runDue(t *turn) error {
	run := &alarmRun{t: t, done: make(chan struct{})}
	o.alarmRun = run
	o.alarmBusy.Store(true)
	defer func() { o.alarmRun = nil; close(run.done) }()
	var errs []error
	seen := map[timerKey]bool{}
	for {
		var row timerRow
		var found bool
		err := o.invoke(t, func(context.Context, any) error {
			var err error
			row, found, err = t.dueTimer(o.rt.now().UnixNano(), seen)
			return err
		})
		if err != nil || !found {
			errs = append(errs, err)
			break
		}
		seen[timerKey{row.owner, row.key}] = true
		errs = append(errs, o.deliver(t, run, row))
	}
	o.alarmBusy.Store(false)
	if len(seen) == 0 && errs[0] == nil || o.alarmAgain.Swap(false) {
		// Nothing was due (the index looked early, or at nothing), or a fire came meanwhile: look
		// again at the earliest timer, if any.
		errs = append(errs, o.invoke(t, func(context.Context, any) error {
			_, err := t.db()
			t.timers = true // the commit tells the scheduler
			return err
		}))
	}
	return errors.Join(errs...)
}

// deliver runs one due timer's handler and records its fate. It returns an error only if that fate
// could not be recorded.
func (o *object) deliver(t *turn, run *alarmRun, row timerRow) error {
	policy := o.rt.opts.AlarmRetry
	run.isAlarm, run.setDuring = row.owner == "" && row.key == "", nil
	token := row.token // a facet's run left marked by a crash: deliver the same run
	row.running, row.token = false, 0
	now := o.rt.now()
	o.alarmFired(now.Sub(time.Unix(0, row.at)))
	info := AlarmInfo{RetryCount: row.retry, IsRetry: row.retry > 0, MaxRetries: policy.MaxRetries, Scheduled: time.Unix(0, row.first)}
	var fr *facetRun
	herr := o.invoke(t, func(ctx context.Context, inst any) error {
		if row.cron != "" && row.retry == 0 && row.missed == MissedSkip {
			if late, err := nextTick(row.cron, time.Unix(0, row.at)); err == nil && !late.After(now) {
				return t.finishTimer(row, now, false) // missed ticks are skipped
			}
		}
		// The row stays, marked running, until the run's last segment commits; meanwhile it is not
		// pending (A13). A facet's run is marked with its token (facet.go).
		r := row
		r.running = true
		if row.owner != "" {
			r.token = cmp.Or(token, newRunToken())
		}
		if err := t.putTimer(r); err != nil {
			return err
		}
		var err error
		if row.owner != "" {
			if fr, err = o.deliverFacet(t, row, r.token, token != 0, now, info); err == nil {
				err = t.endRun(fr)
			}
		} else {
			err = o.timed(ctx, now, func(ctx context.Context) error { return callHandler(ctx, o.ns, inst, row, info) })
		}
		if err != nil {
			return err
		}
		return t.finishTimer(row, now, true)
	})
	if herr == nil {
		return nil
	}
	// The run failed and its last segment was rolled back: record what happens to the timer, as a
	// segment of its own.
	return o.invoke(t, func(context.Context, any) error {
		now := o.rt.now()
		if run.isAlarm && run.setDuring != nil { // the handler's new alarm stands (A14)
			return t.putTimer(timerRow{at: *run.setDuring, first: *run.setDuring})
		}
		if fr != nil && fr.set && fr.next != nil && row.key == "" { // a facet's handler's, too
			return t.putTimer(*fr.next)
		}
		// A timer set while the run was inside Await (by the handler, by another turn, or by a
		// facet through its root) stands too, and so does a deletion: only the timer that ran is
		// retried (A14).
		cur, ok, err := t.getTimer(row.owner, row.key)
		if err != nil || !ok || !cur.running && !cur.same(row) {
			return err
		}
		if cur.running && cur.token != 0 {
			// A facet's run began: its root marked the row with the run's token before the run
			// (here, or before a crash). The run may have committed in the facet before this
			// failure (the root's write that ends it failed): the retry keeps the token, so that
			// the next delivery finds the facet's record instead of running it again (F6).
			token = cur.token
		}
		if errors.Is(herr, ErrClosed) && o.rt.base.Err() != nil {
			// Cut short by the runtime's shutdown, not failed by its handler: the run is due again at
			// once, wherever the object is served next (in cluster mode, the node the shard goes to),
			// with no backoff, as a retry that never exhausts the policy: restarts alone do not make a
			// dead letter (A10).
			r := row.retried(now.UnixNano(), token)
			o.alarmRetried(t, row, time.Unix(0, r.at), herr)
			return t.putTimer(r)
		}
		if row.retry < policy.MaxRetries {
			r := row.retried(now.Add(policy.delay(row.retry+1)).UnixNano(), token)
			o.alarmRetried(t, row, time.Unix(0, r.at), herr)
			return t.putTimer(r)
		}
		return o.dropTimer(t, row, herr, now, cur.running)
	})
}

// retried returns row due again at at, as its next retry. A facet's run marked with its token (not
// 0: left marked by a crash, or begun and then failed in its root) stays marked with it: it may have
// committed in the facet, and only its token lets the next delivery find its record instead of
// running it again (F6). Without a token
// the row is pending again, not running.
func (row timerRow) retried(at, token int64) timerRow {
	row.at, row.retry = at, row.retry+1
	row.running, row.token = token != 0, token
	return row
}

// newRunToken returns a token for a facet's timer run: random, and neither 0 (not running) nor 1
// (running, without a token).
func newRunToken() int64 {
	for {
		if v := rand.Int64(); v > 1 {
			return v
		}
	}
}

// timed runs fn with a timer run's wall-time limit (A10): a run that overstays fails.
func (o *object) timed(ctx context.Context, start time.Time, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.rt.opts.AlarmTimeout)
	defer cancel()
	if err := fn(ctx); err != nil || ctx.Err() == nil {
		return err
	}
	return o.cutShort(ctx.Err(), start)
}

// cutShort is the error of a timer run whose context ended before it returned: it overstayed (A10),
// or the runtime is shutting down (the run is retried when it opens again).
func (o *object) cutShort(err error, start time.Time) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("core: timer run took %v, over the limit of %v", o.rt.now().Sub(start).Round(time.Millisecond), o.rt.opts.AlarmTimeout)
	}
	if o.rt.base.Err() != nil {
		return ErrClosed
	}
	return err
}

// finishTimer ends a timer's run: a one-shot timer is removed, a recurring one goes on with its
// next tick. A timer set anew or deleted during the run is left as it is (A14). marked says the row
// is marked running.
func (t *turn) finishTimer(row timerRow, now time.Time, marked bool) error {
	cur, ok, err := t.getTimer(row.owner, row.key)
	if err != nil || !ok || cur.running != marked || !marked && !cur.same(row) {
		return err
	}
	if row.cron == "" {
		_, err := t.delTimers(row.owner, row.key, false)
		return err
	}
	next, err := nextTick(row.cron, now)
	if err != nil {
		return err
	}
	return t.putTimer(row.with(next.UnixNano()))
}

// alarmRetried records, once the retry is durable, that a failed run will run again.
func (o *object) alarmRetried(t *turn, row timerRow, at time.Time, cause error) {
	t.emit(effect{fn: func(committed bool) {
		if !committed {
			return
		}
		o.ns.count(telemetry.AlarmRetried)
		o.rt.log.Warn("an alarm run failed; it runs again", "event", "alarm_retry", "namespace", o.ns.name, "name", o.place.name,
			"path", row.owner, "key", row.key, "retry", row.retry+1, "at", at, "error", cause)
	}})
}
