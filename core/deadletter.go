package core

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// DeadLetter records an alarm that failed on every run its RetryPolicy allowed. The original
// runtime drops such an alarm silently; this runtime writes it durably to the runtime's dead-letter
// table, reports it to Options.OnAlarmDropped, and can arm it again (Runtime.Rearm).
type DeadLetter struct {
	Seq       int64     // the record's number
	Namespace string    // the object's namespace
	Name      string    // the object's name
	ObjectID  string    // the object's id
	Path      string    // the facet's path below the object ("kind=name/..."); "" for the object itself
	Key       string    // the schedule entry's key; "" for the object's alarm
	Kind      string    // the schedule entry's kind
	Payload   []byte    // the schedule entry's payload
	Scheduled time.Time // when the alarm was first due
	Attempts  int       // runs made
	LastError string    // the last run's error
	Dropped   time.Time // when it was given up
}

// logDropped is the default OnAlarmDropped hook: one structured record.
func (rt *Runtime) logDropped(dl DeadLetter) {
	rt.log.Error("alarm dropped after its last retry", "event", "alarm_dropped", "seq", dl.Seq,
		"namespace", dl.Namespace, "name", dl.Name, "path", dl.Path, "key", dl.Key,
		"scheduled", dl.Scheduled, "attempts", dl.Attempts, "error", dl.LastError)
}

// DeadLetters lists the dead-letter table, oldest first.
func (rt *Runtime) DeadLetters() ([]DeadLetter, error) {
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	ls, err := rt.sched.ix.Letters()
	out := make([]DeadLetter, len(ls))
	for i, l := range ls {
		out[i] = DeadLetter(l)
	}
	return out, err
}

// Rearm arms the dead letter's timer again at at, its retry count back to zero, and removes the
// record. For the object's alarm that is SetAlarm(at) (replacing any alarm set since); a schedule
// entry still there (a recurring one) next runs at at; one that is gone comes back as a one-shot
// entry with its kind and payload. The object's namespace must be registered.
func (rt *Runtime) Rearm(ctx context.Context, seq int64, at time.Time) error {
	dls, err := rt.DeadLetters()
	if err != nil {
		return &Error{Op: "rearm", Err: err}
	}
	i := slices.IndexFunc(dls, func(d DeadLetter) bool { return d.Seq == seq })
	if i < 0 {
		return &Error{Op: "rearm", Err: fmt.Errorf("core: no dead letter %d", seq)}
	}
	dl := &dls[i]
	rt.mu.RLock()
	n := rt.namespaces[dl.Namespace]
	rt.mu.RUnlock()
	fail := func(err error) error { return &Error{Op: "rearm", Namespace: dl.Namespace, Name: dl.Name, Err: err} }
	if n == nil {
		return fail(fmt.Errorf("core: namespace %q is not registered", dl.Namespace))
	}
	if err := rt.enter(); err != nil {
		return fail(err)
	}
	defer rt.leave()
	err = viaCaller(ctx, func(ctx context.Context) error {
		return n.with(dl.Name, dl.ObjectID, placement{}, func(o *object) error {
			return o.run(ctx, func(ctx context.Context, _ any) error {
				t := ctx.(*turn)
				row, ok, err := t.getTimer(dl.Path, dl.Key)
				if err != nil {
					return err
				}
				if !ok {
					row = timerRow{owner: dl.Path, key: dl.Key, kind: dl.Kind, payload: dl.Payload}
				}
				return t.putTimer(row.with(at.UnixNano()))
			})
		})
	})
	if err == nil {
		err = rt.sched.ix.RemoveLetter(seq)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}
