package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Alarmer is implemented by objects that receive their alarm. The runtime
// calls Alarm as a turn of its own (atomic and output-gated like any other)
// when the time set with State.SetAlarm has come, activating the object
// first if it was evicted (constructor, then Alarm).
//
// Delivery is at least once: a run that returns an error, panics or
// overstays Options.AlarmTimeout is retried (see RetryPolicy), and a crash
// during a run means it runs again. Write Alarm so that a second run is
// harmless: store absolute values, not increments.
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

// LastAttempt reports whether a failure of this run drops the alarm (to
// the dead-letter table) instead of retrying it.
func (i AlarmInfo) LastAttempt() bool { return i.RetryCount >= i.MaxRetries }

// RetryPolicy says when a failed alarm runs again. The zero value is the
// original runtime's policy: 2 s, then doubling, at most 6 retries (7 runs
// in all, 126 s of delays), each delay lengthened by up to 25% at random so
// that many failing alarms do not retry in lock-step.
type RetryPolicy struct {
	FirstDelay time.Duration // default 2 s
	Factor     float64       // default 2
	MaxRetries int           // default 6; negative means no retries
	Jitter     float64       // extra fraction of each delay, at random in [0, Jitter); default 0.25, negative for none
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.FirstDelay <= 0 {
		p.FirstDelay = 2 * time.Second
	}
	if p.Factor < 1 {
		p.Factor = 2
	}
	switch {
	case p.MaxRetries == 0:
		p.MaxRetries = 6
	case p.MaxRetries < 0:
		p.MaxRetries = 0
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = 0.25
	case p.Jitter < 0:
		p.Jitter = 0
	}
	return p
}

// Delay returns the wait before retry number n (1-based).
func (p RetryPolicy) Delay(n int) time.Duration {
	d := float64(p.FirstDelay) * math.Pow(p.Factor, float64(n-1))
	if p.Jitter > 0 {
		d += d * p.Jitter * rand.Float64()
	}
	return time.Duration(min(d, float64(365*24*time.Hour)))
}

// maxAlarmTime is the latest time an alarm can be set for.
var maxAlarmTime = time.Unix(0, math.MaxInt64).Add(-365 * 24 * time.Hour)

// SetAlarm sets the object's one alarm to t, replacing any alarm pending
// (SEMANTICS A1). A time in the past fires at once. It is part of the turn:
// it takes effect when the turn commits, and it counts as one row written.
// The object must implement Alarmer.
func (st *State) SetAlarm(ctx context.Context, t time.Time) error {
	o := st.o
	if err := o.inTurn(ctx); err != nil {
		return err
	}
	switch {
	case t.IsZero():
		return errors.New("core: SetAlarm: zero time")
	case t.After(maxAlarmTime):
		return fmt.Errorf("core: SetAlarm: %v is too far in the future", t)
	case !o.ns.alarms:
		return fmt.Errorf("core: SetAlarm: %s objects do not implement core.Alarmer", o.ns.name)
	}
	at := t.UnixNano()
	if err := o.timerPut(timerRow{at: at, first: at}); err != nil {
		return fmt.Errorf("core: SetAlarm: %w", err)
	}
	if r := o.alarmRun; r != nil && r.tc == o.cur && r.isAlarm {
		r.setDuring = &at
	}
	return nil
}

// GetAlarm returns the pending alarm's time, and false if none is set.
// While Alarm runs, the alarm being run is no longer pending (A13).
func (st *State) GetAlarm(ctx context.Context) (time.Time, bool, error) {
	if err := st.o.inTurn(ctx); err != nil {
		return time.Time{}, false, err
	}
	r, ok, err := st.o.timerGet("")
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return time.Unix(0, r.at), true, nil
}

// DeleteAlarm cancels the pending alarm, including a retry waiting to run.
func (st *State) DeleteAlarm(ctx context.Context) error {
	if err := st.o.inTurn(ctx); err != nil {
		return err
	}
	_, err := st.o.timerDel("")
	return err
}

// alarmChange is a change to the object's earliest timer, committed.
type alarmChange struct {
	at  int64 // unix ns
	del bool  // no timer left
}

// alarmRun is the state of a run of due timers in progress.
type alarmRun struct {
	tc        *turnCtx      // the segment running a handler
	isAlarm   bool          // it runs the Alarm handler
	setDuring *int64        // SetAlarm called by the Alarm handler (A14)
	done      chan struct{} // closed when the run is over
}

// runTimers delivers the object's due timers (its alarm, its schedule
// entries), one after the other, each in turn segments of its own with
// its own retry state, so that a failing one never delays the others.
func (o *object) runTimers(ctx context.Context) error {
	for {
		if err := o.acquire(ctx, true); err != nil {
			return err
		}
		if o.rt.isClosed.Load() {
			_, _ = o.leave(nil)
			return ErrClosed
		}
		r := o.alarmRun
		if r == nil {
			break
		}
		// Another run is inside Await: one run at a time (A9).
		if _, err := o.leave(nil); err != nil {
			return err
		}
		<-r.done
	}
	if !o.built {
		if err := o.construct(ctx); err != nil {
			wait, cerr := o.leave(nil)
			return firstErr(err, wait.wait(), cerr)
		}
	}
	run := &alarmRun{done: make(chan struct{})}
	o.alarmRun = run
	var (
		dropped []DeadLetter
		errs    []error
		seen    = map[timerKey]bool{}
		touched bool
	)
	for {
		var row timerRow
		var found bool
		err := o.invoke(ctx, func(context.Context, any) error {
			var err error
			row, found, err = o.dueTimer(o.rt.now().UnixNano(), seen)
			return err
		})
		if err != nil {
			errs = append(errs, err)
			break
		}
		if !found {
			break
		}
		touched = true
		seen[timerKey{row.owner, row.key}] = true
		dl, err := o.deliver(ctx, run, row)
		if err != nil {
			errs = append(errs, err)
		}
		if dl != nil {
			dropped = append(dropped, *dl)
		}
	}
	o.alarmRun = nil
	close(run.done)
	if !touched && len(errs) == 0 {
		// Nothing was due: the index looked early (or at nothing). Look
		// again at the earliest timer, if any.
		_ = o.invoke(ctx, func(context.Context, any) error {
			next, ok, err := o.nextTimer()
			if err == nil && ok {
				o.rt.sched.schedule(o.ns.name, o.id, o.name, next)
			} else if err == nil {
				o.rt.sched.committed(o.ns.name, o.id, o.name, &alarmChange{del: true})
			}
			return err
		})
	}
	wait, cerr := o.leave(nil)
	if cerr = firstErr(wait.wait(), cerr); cerr != nil {
		return cerr
	}
	for _, dl := range dropped {
		o.rt.opts.OnAlarmDropped(dl)
	}
	return errors.Join(errs...)
}

// deliver runs one due timer's handler and records its fate. It returns
// an error only if that fate could not be recorded.
func (o *object) deliver(ctx context.Context, run *alarmRun, row timerRow) (*DeadLetter, error) {
	policy := o.rt.opts.AlarmRetry
	isAlarm := row.owner == "" && row.key == ""
	run.isAlarm, run.setDuring = isAlarm, nil
	var advanced int64 // a recurring timer's next tick, as the run set it
	now := o.rt.now()
	herr := o.invoke(ctx, func(ctx context.Context, inst any) error {
		// The timer is no longer pending while it runs (A13); a recurring
		// one moves on to its next tick (the missed ones fold into one).
		if row.cron != "" {
			next, err := nextTick(row.cron, now)
			if err != nil {
				return err
			}
			advanced = next.UnixNano()
			if row.retry == 0 && row.missed == MissedSkip {
				if late, err := nextTick(row.cron, time.Unix(0, row.at)); err == nil && !late.After(now) {
					return o.putTimer(row.with(next.UnixNano()))
				}
			}
			if err := o.putTimer(row.with(next.UnixNano())); err != nil {
				return err
			}
		} else if _, err := o.delTimer(row.owner, row.key); err != nil {
			return err
		}
		run.tc = ctx.(*turnCtx)
		info := AlarmInfo{RetryCount: row.retry, IsRetry: row.retry > 0, MaxRetries: policy.MaxRetries, Scheduled: time.Unix(0, row.first)}
		if row.owner != "" {
			return o.deliverFacet(ctx, row, now, info)
		}
		hctx, cancel := context.WithTimeout(ctx, o.rt.opts.AlarmTimeout)
		defer cancel()
		var err error
		if isAlarm {
			if h, ok := inst.(Alarmer); ok {
				err = h.Alarm(hctx, info)
			} else {
				err = fmt.Errorf("core: %s objects do not implement core.Alarmer", o.ns.name)
			}
		} else {
			err = o.callTimerHandler(hctx, inst, row, info)
		}
		if err == nil && hctx.Err() != nil {
			err = fmt.Errorf("core: timer run took %v, over the limit of %v", time.Since(now).Round(time.Millisecond), o.rt.opts.AlarmTimeout)
		}
		return err
	})
	run.tc = nil
	if herr == nil {
		return nil, nil
	}
	// The run failed and its writes were rolled back: record what happens
	// to the timer, as a segment of its own.
	var dropped *DeadLetter
	perr := o.invoke(ctx, func(context.Context, any) error {
		now := o.rt.now()
		if isAlarm && run.setDuring != nil { // the handler's new alarm stands (A14)
			return o.putTimer(timerRow{at: *run.setDuring, first: *run.setDuring})
		}
		// A timer set while the run was inside Await (by the handler, by
		// another turn, or by a facet through its root) stands too: only
		// the timer that ran is retried (A14). Unchanged means the row is
		// as it ran, or as the run left it (deleted, or at its next tick).
		cur, ok, err := o.getTimer(row.owner, row.key)
		if err != nil {
			return err
		}
		if ok && !cur.same(row) && (row.cron == "" || cur.at != advanced) {
			return nil
		}
		switch {
		case row.retry < policy.MaxRetries:
			r := row
			r.at, r.retry = now.Add(policy.Delay(row.retry+1)).UnixNano(), row.retry+1
			return o.putTimer(r)
		}
		dl := DeadLetter{
			Namespace: o.ns.name, Name: o.name, ObjectID: o.id, Path: row.owner, Key: row.key, Kind: row.kind, Payload: row.payload,
			Scheduled: time.Unix(0, row.first), Attempts: row.retry + 1,
			LastError: remoteCause(herr).Error(), Dropped: now,
		}
		seq, err := o.rt.sched.ix.addDeadLetter(dl)
		if err != nil {
			return err
		}
		dl.Seq = seq
		dropped = &dl
		if row.cron != "" { // a recurring timer goes on with its next tick
			next, err := nextTick(row.cron, now)
			if err != nil {
				return err
			}
			return o.putTimer(row.with(next.UnixNano()))
		}
		_, err = o.delTimer(row.owner, row.key)
		return err
	})
	return dropped, perr
}

// remoteCause unwraps the runtime's wrapping of a user error.
func remoteCause(err error) error {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Err
	}
	return err
}
