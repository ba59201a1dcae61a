package core

import (
	"context"
	"fmt"
	"time"
)

// The schedule, many timers over the object's one alarm: an object that implements TimerHandler
// keeps any number of named timers (one-shot at a time or after a delay, or recurring by a cron
// expression) in its own database; the runtime's alarm for the object points at the earliest of
// them and of its own alarm (SEMANTICS A1, A17, F5). Each timer is delivered at least once with the
// alarm's retry rules (RetryPolicy, dead letters) and its own retry state: none delays another.

// Timer is one entry of an object's schedule.
type Timer struct {
	Key     string    // the entry's name, unique in the object
	Kind    string    // free text for the handler to dispatch on
	Payload []byte    // free data for the handler
	At      time.Time // when it is (or was) due
	Cron    string    // the cron spec of a recurring entry, "" for a one-shot one
	Missed  Missed    // what a recurring entry does about ticks missed while down
}

// Missed says what a recurring timer does when the runtime was down (or the object busy) over one
// or more of its ticks. Never a flood: at most one run is made for all the ticks missed.
type Missed int

const (
	MissedFireOnce Missed = iota // MissedFireOnce runs once for all missed ticks, then goes on from now.
	MissedSkip                   // MissedSkip drops missed ticks and waits for the next one.
)

// TimerHandler is implemented by objects that keep a schedule. OnTimer runs as a turn when an entry
// is due; a recurring entry is never run twice at once (all of an object's timers run one at a
// time, A9). Write it to be safe to run twice: delivery is at least once.
type TimerHandler interface {
	OnTimer(ctx context.Context, t Timer, info AlarmInfo) error
}

func (st *State) checkTimerKey(ctx context.Context, key string) (*turn, error) {
	t, err := st.o.inTurn(ctx)
	switch {
	case err != nil:
		return nil, err
	case key == "":
		return nil, fmt.Errorf("core: schedule: empty key")
	case len(key) > MaxKeyLen:
		return nil, fmt.Errorf("%w: schedule key of %d bytes (limit %d)", ErrTooLarge, len(key), MaxKeyLen)
	case !st.o.ns.timers:
		return nil, fmt.Errorf("core: schedule: %s objects do not implement core.TimerHandler", st.o.ns.name)
	}
	return t, nil
}

func (t *turn) putEntry(r timerRow) error {
	return t.timerTable(func(h *turn, owner string) error {
		r.owner = owner
		return h.putTimer(r)
	})
}

// ScheduleAt sets, in the turn, the one-shot timer key to fire at t, replacing any timer of that
// key.
func (st *State) ScheduleAt(ctx context.Context, key string, t time.Time, kind string, payload []byte) error {
	tu, err := st.checkTimerKey(ctx, key)
	if err != nil {
		return err
	}
	if t.IsZero() || t.After(maxAlarmTime) {
		return fmt.Errorf("core: schedule %q: time %v out of range", key, t)
	}
	at := t.UnixNano()
	return tu.putEntry(timerRow{key: key, at: at, first: at, kind: kind, payload: payload})
}

// ScheduleAfter sets the one-shot timer key to fire after d.
func (st *State) ScheduleAfter(ctx context.Context, key string, d time.Duration, kind string, payload []byte) error {
	return st.ScheduleAt(ctx, key, st.Now().Add(d), kind, payload)
}

// ScheduleCron sets the recurring timer key to fire at each tick of spec, a standard five-field
// cron expression ("*/5 * * * *") or a descriptor such as "@hourly" or "@every 10s", in local time.
func (st *State) ScheduleCron(ctx context.Context, key, spec, kind string, payload []byte, missed Missed) error {
	tu, err := st.checkTimerKey(ctx, key)
	if err != nil {
		return err
	}
	next, err := nextTick(spec, st.Now())
	if err != nil {
		return err
	}
	at := next.UnixNano()
	return tu.putEntry(timerRow{key: key, at: at, first: at, kind: kind, payload: payload, cron: spec, missed: missed})
}

// CancelSchedule removes the timer key (a pending retry included), reporting whether there was one.
func (st *State) CancelSchedule(ctx context.Context, key string) (ok bool, err error) {
	if key == "" {
		return false, fmt.Errorf("core: schedule: empty key")
	}
	err = st.onTimers(ctx, func(h *turn, owner string) error {
		ok, err = h.delTimers(owner, key, false)
		return err
	})
	return ok, err
}

// Schedules lists the object's schedule, soonest first. The alarm is not in it (see GetAlarm), nor
// an entry while it runs, unless it is recurring: that one is listed at its next tick.
func (st *State) Schedules(ctx context.Context) (out []Timer, err error) {
	err = st.onTimers(ctx, func(h *turn, owner string) error {
		out, err = h.listTimers(owner)
		return err
	})
	return out, err
}
