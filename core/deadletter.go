package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/durable-go/durable/core/internal/runindex"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// DeadLetter records an alarm that failed on every run its RetryPolicy allowed. The original
// runtime drops such an alarm silently; this runtime writes it durably to the runtime's dead-letter
// table, reports it to Options.OnAlarmDropped, and can arm it again (Admin.Rearm).
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

// DeadLetters lists the dead-letter table, oldest first. In cluster mode it lists the cluster's dead
// letters, whichever node gave their alarms up, read from the log (SEMANTICS CL9).
func (a *Admin) DeadLetters() ([]DeadLetter, error) {
	rt := a.rt
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	if rt.cluster != nil {
		return rt.clusterLetters()
	}
	ls, err := rt.ix.Letters()
	out := make([]DeadLetter, len(ls))
	for i, l := range ls {
		out[i] = DeadLetter(l)
	}
	return out, err
}

// Rearm arms the dead letter's timer again at at, its retry count back to zero, and removes the
// record. It arms a timer once per letter: a letter re-armed already is only removed. For the object's alarm that is SetAlarm(at) (replacing any alarm set since); a schedule
// entry still there (a recurring one) next runs at at; one that is gone comes back as a one-shot
// entry with its kind and payload. The object's constructor does not run for it if its namespace is not
// registered (a tool on a directory no server holds): the timer is written to its database, and
// fires once a runtime registering the namespace opens the directory. In cluster mode any node re-arms
// any of the cluster's letters: the timer is armed at the object's owner (through
// Replication.Calls), and the namespace must be registered on this node.
func (a *Admin) Rearm(ctx context.Context, seq int64, at time.Time) error {
	rt := a.rt
	if rt.cluster != nil {
		return rt.rearmCluster(ctx, seq, at)
	}
	dls, err := a.DeadLetters()
	if err != nil {
		return &Error{Op: "rearm", Err: err}
	}
	dl, err := findLetter(dls, seq)
	if err != nil {
		return err
	}
	rt.mu.RLock()
	n := rt.namespaces[dl.Namespace]
	rt.mu.RUnlock()
	fail := func(err error) error { return &Error{Op: "rearm", Namespace: dl.Namespace, Name: dl.Name, Err: err} }
	if err := rt.enter(); err != nil {
		return fail(err)
	}
	defer rt.leave()
	arm := armLetter(dl, at)
	if n == nil {
		err = rt.offline(ctx, dl.Namespace, dl.Name, dl.ObjectID, arm)
	} else {
		err = viaCaller(ctx, func(ctx context.Context) error {
			return n.with(dl.Name, dl.ObjectID, placement{}, func(o *object) error { return o.run(ctx, arm) })
		})
	}
	if err == nil {
		err = rt.ix.RemoveLetter(seq)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// armLetter is the turn that arms dl's timer again at at, once per letter (see Rearm).
func armLetter(dl *DeadLetter, at time.Time) func(context.Context, any) error {
	return func(ctx context.Context, _ any) error {
		t := ctx.(*turn)
		// The object keeps its own copy of the letter and a mark of each re-arm: a letter
		// re-armed already (written twice by a crash, or re-armed by a Rearm whose removal of
		// the record was lost) is not armed again.
		k := letterKey(dl.Path, dl.Key, dl.Scheduled.UnixNano())
		kept, err := t.hasMeta("dead:" + k)
		if err != nil {
			return err
		}
		if done, err := t.hasMeta("rearmed:" + k); err != nil || done && !kept {
			return err
		}
		if err := t.setMeta("dead:"+k, nil); err != nil {
			return err
		}
		if err := t.setMeta("rearmed:"+k, at.UnixNano()); err != nil {
			return err
		}
		row, ok, err := t.getTimer(dl.Path, dl.Key)
		if err != nil {
			return err
		}
		if !ok {
			row = timerRow{owner: dl.Path, key: dl.Key, kind: dl.Kind, payload: dl.Payload}
		}
		return t.putTimer(row.with(at.UnixNano()))
	}
}

// letterKey identifies a dropped timer: its owner's path, its key, and when it was first due.
func letterKey(path, key string, scheduled int64) string {
	return path + "\x00" + key + "\x00" + strconv.FormatInt(scheduled, 10)
}

// dropTimer gives up a timer after its last run: the dead letter is written durably to the
// runtime's table, and a copy of it to the object's own _durable_meta in the turn (so a rebuilt
// index finds it again); OnAlarmDropped hears of it once the turn commits.
func (o *object) dropTimer(t *turn, row timerRow, cause error, now time.Time, marked bool) error {
	dl := DeadLetter{
		Namespace: o.ns.name, Name: o.name, ObjectID: o.id, Path: row.owner, Key: row.key, Kind: row.kind, Payload: row.payload,
		Scheduled: time.Unix(0, row.first), Attempts: row.retry + 1,
		LastError: cause.Error(), Dropped: now,
	}
	b, err := json.Marshal(dl)
	if err != nil {
		return err
	}
	if err := t.setMeta("dead:"+letterKey(dl.Path, dl.Key, row.first), string(b)); err != nil {
		return err
	}
	if o.rt.cluster != nil {
		dl.Seq, err = o.rt.addClusterLetter(t, dl)
	} else {
		dl.Seq, err = o.rt.ix.AddLetter(runindex.Letter(dl))
	}
	if err != nil {
		return err
	}
	t.emit(effect{fn: func(committed bool) {
		if committed {
			o.ns.count(telemetry.AlarmDeadLettered) // the record is OnAlarmDropped's
			o.rt.hook("OnAlarmDropped", func() { o.rt.opts.OnAlarmDropped(dl) })
		}
	}})
	return t.finishTimer(row, now, marked)
}

// constructFailed handles a constructor's failure. For a call it is the call's error. For a run of
// due timers (alarm, true) each due timer's retry ladder counts it as a failed run, as a failing
// handler's would: an object whose constructor always fails ends in the dead-letter table instead
// of being retried for ever. The failure is then recorded, and the run returns nil; if it cannot be
// recorded (the database does not open), the error stands and the scheduler looks again later.
func (o *object) constructFailed(t *turn, alarm bool, cerr error) error {
	if !alarm {
		return cerr
	}
	policy := o.rt.opts.AlarmRetry
	now := o.rt.now()
	n := 0
	err := o.invoke(t, func(context.Context, any) error {
		rows, err := t.queryTimers("at <= ? ORDER BY at, owner, key", now.UnixNano())
		if err != nil {
			return err
		}
		for _, row := range rows {
			n++
			if row.retry < policy.MaxRetries {
				r := row.retried(now.Add(policy.delay(row.retry+1)).UnixNano(), row.token)
				o.alarmRetried(t, row, time.Unix(0, r.at), cerr)
				if err := t.putTimer(r); err != nil {
					return err
				}
				continue
			}
			if err := o.dropTimer(t, row, cerr, now, row.running); err != nil {
				return err
			}
		}
		t.timers = true // the commit tells the scheduler
		return nil
	})
	if err != nil {
		return errors.Join(cerr, err)
	}
	o.rt.log.Warn("the constructor failed for a run of due timers: each counts it as a failed run", "event", "alarm_constructor_failed",
		"namespace", o.ns.name, "name", o.name, "timers", n, "error", cerr)
	return nil
}

// hasMeta reports whether the object's _durable_meta holds key k.
func (t *turn) hasMeta(k string) (bool, error) {
	st, err := t.db()
	if err != nil {
		return false, err
	}
	n := 0
	err = st.QueryOwn("SELECT count(*) FROM main._durable_meta WHERE k = ?", []any{k}, func(r *sql.Rows) error { return r.Scan(&n) })
	return n > 0, err
}

// setMeta sets key k of the object's _durable_meta to v, in the turn; nil deletes it.
func (t *turn) setMeta(k string, v any) error {
	st, err := t.write()
	if err != nil {
		return err
	}
	if v == nil {
		return st.ExecOwn("DELETE FROM main._durable_meta WHERE k = ?", k)
	}
	return st.ExecOwn("INSERT OR REPLACE INTO main._durable_meta(k, v) VALUES (?, ?)", k, v)
}

// findLetter is the letter seq of dls, or Rearm's error for none.
func findLetter(dls []DeadLetter, seq int64) (*DeadLetter, error) {
	i := slices.IndexFunc(dls, func(d DeadLetter) bool { return d.Seq == seq })
	if i < 0 {
		return nil, &Error{Op: "rearm", Err: fmt.Errorf("core: no dead letter %d", seq)}
	}
	return &dls[i], nil
}
