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
func (st *State) SetAlarm(t time.Time) error {
	o := st.o
	switch {
	case t.IsZero():
		return errors.New("core: SetAlarm: zero time")
	case t.After(maxAlarmTime):
		return fmt.Errorf("core: SetAlarm: %v is too far in the future", t)
	case !o.ns.alarms:
		return fmt.Errorf("core: SetAlarm: %s objects do not implement core.Alarmer", o.ns.name)
	}
	if err := o.writeAlarm(t.UnixNano(), 0, t.UnixNano()); err != nil {
		return err
	}
	if r := o.alarmRun; r != nil && r.tc == o.cur {
		at := t.UnixNano()
		r.setDuring = &at
	}
	return nil
}

// GetAlarm returns the pending alarm's time, and false if none is set.
// While Alarm runs, the alarm being run is no longer pending (A13).
func (st *State) GetAlarm() (time.Time, bool, error) {
	at, _, _, ok, err := st.o.readAlarm()
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return time.Unix(0, at), true, nil
}

// DeleteAlarm cancels the pending alarm, including a retry waiting to run.
func (st *State) DeleteAlarm() error {
	s, err := st.Storage().begin()
	if err != nil {
		return err
	}
	o := st.o
	o.batch.dirty = true
	if err := s.execInternal("DELETE FROM _durable_meta WHERE k IN ('alarm', 'alarm_retry', 'alarm_first')"); err != nil {
		return fmt.Errorf("core: DeleteAlarm: %w", err)
	}
	o.segAlarm = &alarmChange{del: true}
	return nil
}

// alarmChange is a change to the object's alarm not yet committed.
type alarmChange struct {
	at  int64 // unix ns
	del bool
}

// alarmRun is the state of an Alarm run in progress.
type alarmRun struct {
	tc        *turnCtx
	setDuring *int64        // SetAlarm called by the handler (A14)
	done      chan struct{} // closed when the run is over
}

func (o *object) writeAlarm(at int64, retry int, first int64) error {
	s, err := o.state.Storage().begin()
	if err != nil {
		return err
	}
	o.batch.dirty = true
	if err := s.execInternal(`INSERT INTO _durable_meta(k, v) VALUES ('alarm', ?), ('alarm_retry', ?), ('alarm_first', ?)
ON CONFLICT(k) DO UPDATE SET v = excluded.v`, at, retry, first); err != nil {
		return fmt.Errorf("core: SetAlarm: %w", err)
	}
	o.writes.Add(1)
	o.segAlarm = &alarmChange{at: at}
	return nil
}

// readAlarm returns the stored alarm: its time, its retry count and the
// time first set for.
func (o *object) readAlarm() (at int64, retry int, first int64, ok bool, err error) {
	s, err := o.state.Storage().begin()
	if err != nil {
		return 0, 0, 0, false, err
	}
	s.internal = true
	defer func() { s.internal = false }()
	stmt, err := s.ownStmt(`SELECT
 (SELECT v FROM _durable_meta WHERE k = 'alarm'),
 coalesce((SELECT v FROM _durable_meta WHERE k = 'alarm_retry'), 0),
 (SELECT v FROM _durable_meta WHERE k = 'alarm_first')`)
	if err != nil {
		return 0, 0, 0, false, fmt.Errorf("core: GetAlarm: %w", err)
	}
	var a, f *int64
	if err := stmt.QueryRow().Scan(&a, &retry, &f); err != nil {
		return 0, 0, 0, false, fmt.Errorf("core: GetAlarm: %w", err)
	}
	if a == nil {
		return 0, 0, 0, false, nil
	}
	first = *a
	if f != nil {
		first = *f
	}
	return *a, retry, first, true, nil
}

// afterDeleteAll records that DeleteAll removed the alarm.
func (o *object) afterDeleteAll(keepAlarm bool) error {
	if !keepAlarm {
		o.segAlarm = &alarmChange{del: true}
	}
	return nil
}

// runAlarm delivers a due alarm to the object as a turn. It returns the
// dead letter written if the alarm ran out of retries.
func (o *object) runAlarm(ctx context.Context) (*DeadLetter, error) {
	for {
		if err := o.acquire(ctx, true); err != nil {
			return nil, err
		}
		if o.rt.isClosed.Load() {
			_, _ = o.leave(nil)
			return nil, ErrClosed
		}
		r := o.alarmRun
		if r == nil {
			break
		}
		// Another run is inside Await: one run at a time (A9).
		if _, err := o.leave(nil); err != nil {
			return nil, err
		}
		<-r.done
	}
	if !o.built {
		if err := o.construct(ctx); err != nil {
			wait, cerr := o.leave(nil)
			return nil, firstErr(err, wait.wait(), cerr)
		}
	}
	policy := o.rt.opts.AlarmRetry
	run := alarmRun{done: make(chan struct{})}
	o.alarmRun = &run
	defer close(run.done)
	var (
		ran     bool
		retry   int
		first   int64
		resched int64
		dropped *DeadLetter
		started time.Time
	)
	err := o.invoke(ctx, func(ctx context.Context, inst any) error {
		at, r, f, ok, err := o.readAlarm()
		if err != nil || !ok {
			return err // nothing stored: a spurious index entry
		}
		now := time.Now()
		if at > now.UnixNano() {
			resched = at // set later since this fire was scheduled
			return nil
		}
		// The alarm is no longer pending while it runs (A13).
		if _, err := o.state.Storage().begin(); err != nil {
			return err
		}
		if err := o.clearAlarm(); err != nil {
			return err
		}
		ran, retry, first = true, r, f
		run.tc = ctx.(*turnCtx)
		info := AlarmInfo{RetryCount: r, IsRetry: r > 0, MaxRetries: policy.MaxRetries, Scheduled: time.Unix(0, f)}
		hctx, cancel := context.WithTimeout(ctx, o.rt.opts.AlarmTimeout)
		defer cancel()
		started = time.Now()
		herr := inst.(Alarmer).Alarm(hctx, info)
		if herr == nil && hctx.Err() != nil {
			herr = fmt.Errorf("core: alarm run took %v, over the limit of %v", time.Since(started).Round(time.Millisecond), o.rt.opts.AlarmTimeout)
		}
		return herr
	})
	if err != nil && ran {
		// The run failed and its writes were rolled back: decide what
		// happens to the alarm, as a turn segment of its own.
		perr := o.invoke(ctx, func(context.Context, any) error {
			switch {
			case run.setDuring != nil: // the handler's new alarm stands (A14)
				return o.writeAlarm(*run.setDuring, 0, *run.setDuring)
			case retry < policy.MaxRetries:
				at := time.Now().Add(policy.Delay(retry + 1)).UnixNano()
				return o.writeAlarm(at, retry+1, first)
			default:
				dl := DeadLetter{
					Namespace: o.ns.name, Name: o.name, ObjectID: o.id,
					Scheduled: time.Unix(0, first), Attempts: retry + 1,
					LastError: remoteCause(err).Error(), Dropped: time.Now(),
				}
				seq, derr := o.rt.sched.ix.addDeadLetter(dl)
				if derr != nil {
					return derr
				}
				dl.Seq = seq
				dropped = &dl
				return o.clearAlarm()
			}
		})
		err = perr // the failure is handled once its consequence is recorded
	}
	o.alarmRun = nil
	if resched != 0 {
		o.rt.sched.schedule(o.ns.name, o.id, o.name, resched)
	}
	wait, cerr := o.leave(nil)
	if cerr = firstErr(wait.wait(), cerr); cerr != nil {
		return nil, cerr
	}
	if dropped != nil {
		o.rt.opts.OnAlarmDropped(*dropped)
	}
	return dropped, err
}

// clearAlarm removes the stored alarm inside the current segment.
func (o *object) clearAlarm() error {
	s, err := o.state.Storage().begin()
	if err != nil {
		return err
	}
	o.batch.dirty = true
	if err := s.execInternal("DELETE FROM _durable_meta WHERE k IN ('alarm', 'alarm_retry', 'alarm_first')"); err != nil {
		return err
	}
	o.segAlarm = &alarmChange{del: true}
	return nil
}

// remoteCause unwraps the runtime's wrapping of a user error.
func remoteCause(err error) error {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Err
	}
	return err
}
