package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/core"
)

// Lab is the object of the original's hands-on session:
// one alarm, a debounced counter of hits, a switch that makes the alarm
// handler fail, and a log of what happened, all in the object's own
// storage. The HTTP routes /reset, /armtwice, /deleteall, /hit, /state,
// /mode and /arm each run one of its methods as a turn, with that turn's
// ctx. Its times come from the runtime's clock (State.Now), the one its
// alarm is due by.
type Lab struct {
	st       *core.State
	debounce time.Duration // how long after the first hit the flush runs
	fresh    bool          // no turn has run since the constructor
}

// labOptions configure the lab objects of a namespace.
type labOptions struct {
	Debounce time.Duration // the original's 2 s
}

// newLab is the constructor. It runs on every activation, so it only
// creates tables (the original's ensureSchema) and never arms the alarm (A16).
func (o labOptions) newLab(ctx context.Context, st *core.State) (*Lab, error) {
	d := o.Debounce
	if d <= 0 {
		d = 2 * time.Second
	}
	l := &Lab{st: st, debounce: d, fresh: true}
	return l, l.ensureSchema(ctx)
}

// The lab's alarm handler modes (GET /mode?m=).
const (
	modeOK    = "ok"    // flush, succeed
	modeThrow = "throw" // fail on every run: 7 runs, then the dead-letter table
	modeFlaky = "flaky" // fail the first two runs, succeed on the third (the original)
)

// labSchema is the lab's ensureSchema: DeleteAll drops every table, so it
// runs again after each DeleteAll.
const labSchema = `CREATE TABLE IF NOT EXISTS pending(id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
INSERT OR IGNORE INTO pending(id, n) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY,
  at INTEGER NOT NULL,            -- unix ms
  kind TEXT NOT NULL,             -- alarm, flush (the original's); arm, fail, drop, reset, deleteall
  note TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT ''
)`

// maxEvents bounds the log: older events are forgotten.
const maxEvents = 500

func (l *Lab) ensureSchema(ctx context.Context) error {
	_, err := l.st.Storage().Exec(ctx, labSchema)
	return err
}

// woke reports whether this is the first turn since the constructor ran.
func (l *Lab) woke() bool {
	f := l.fresh
	l.fresh = false
	return f
}

// note appends an event to the log.
func (l *Lab) note(ctx context.Context, at time.Time, kind, note, detail string) error {
	s := l.st.Storage()
	res, err := s.Exec(ctx, "INSERT INTO events(at, kind, note, detail) VALUES (?, ?, ?, ?)", at.UnixMilli(), kind, note, detail)
	if err != nil {
		return err
	}
	_, err = s.Exec(ctx, "DELETE FROM events WHERE seq <= ?", res.LastInsertID-maxEvents)
	return err
}

// alarmMS returns the pending alarm in ms since the epoch, nil if none, as
// the original's getAlarm() returns number | null.
func (l *Lab) alarmMS(ctx context.Context) (*int64, error) {
	at, ok, err := l.st.GetAlarm(ctx)
	if err != nil || !ok {
		return nil, err
	}
	ms := at.UnixMilli()
	return &ms, nil
}

// setAlarm arms the alarm at a whole millisecond, as the original does, so
// that GetAlarm gives back exactly what was set.
func (l *Lab) setAlarm(ctx context.Context, at time.Time) (int64, error) {
	ms := at.UnixMilli()
	return ms, l.st.SetAlarm(ctx, time.UnixMilli(ms))
}

// Reset clears the object: storage (DeleteAll takes the alarm with it),
// mode and events.
func (l *Lab) Reset(ctx context.Context) error {
	l.woke()
	if err := l.st.Storage().DeleteAll(ctx); err != nil {
		return err
	}
	if err := l.ensureSchema(ctx); err != nil {
		return err
	}
	return l.note(ctx, l.st.Now(), "reset", "DeleteAll: storage, alarm and events cleared", "")
}

// ArmTwice is the original's /armtwice: one alarm per object, SetAlarm
// overwrites (A1), DeleteAlarm clears (A2).
type ArmTwice struct {
	First       int64  `json:"first"`
	AfterFirst  *int64 `json:"afterFirst"`
	Second      int64  `json:"second"`
	AfterSecond *int64 `json:"afterSecond"`
	AfterDelete *int64 `json:"afterDelete"`
	Overwritten bool   `json:"overwritten"`
}

// ArmTwice arms +30 s, then +60 s, reading the alarm after each, then
// deletes it.
func (l *Lab) ArmTwice(ctx context.Context) (ArmTwice, error) {
	l.woke()
	var r ArmTwice
	now := l.st.Now()
	var err error
	if r.First, err = l.setAlarm(ctx, now.Add(30*time.Second)); err != nil {
		return r, err
	}
	if r.AfterFirst, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	if r.Second, err = l.setAlarm(ctx, now.Add(60*time.Second)); err != nil {
		return r, err
	}
	if r.AfterSecond, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	if err := l.st.DeleteAlarm(ctx); err != nil {
		return r, err
	}
	if r.AfterDelete, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	r.Overwritten = r.AfterSecond != nil && *r.AfterSecond == r.Second && r.Second != r.First
	return r, l.note(ctx, now, "armtwice", fmt.Sprintf("armed %d, then %d: one alarm, the second replaced the first; deleted", r.First, r.Second), "")
}

// DeleteAllResult is the original's /deleteall.
type DeleteAllResult struct {
	AlarmBefore *int64 `json:"alarmBefore"`
	AlarmAfter  *int64 `json:"alarmAfter"`
	Cleared     bool   `json:"cleared"`
}

// DeleteAll arms the alarm, stores a value, and calls Storage.DeleteAll,
// which takes the alarm and every table with it (A6). Cleared reports that
// nothing the object stored is left.
func (l *Lab) DeleteAll(ctx context.Context) (DeleteAllResult, error) {
	l.woke()
	var r DeleteAllResult
	now := l.st.Now()
	if _, err := l.setAlarm(ctx, now.Add(30*time.Second)); err != nil {
		return r, err
	}
	s := l.st.Storage()
	if err := s.Put(ctx, "probe", []byte("stored before DeleteAll")); err != nil {
		return r, err
	}
	var err error
	if r.AlarmBefore, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	if err := s.DeleteAll(ctx); err != nil {
		return r, err
	}
	if r.AlarmAfter, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	var tables int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'").Scan(&tables); err != nil {
		return r, err
	}
	_, kept, err := s.Get(ctx, "probe")
	if err != nil {
		return r, err
	}
	r.Cleared = tables == 0 && !kept
	if err := l.ensureSchema(ctx); err != nil { // the object goes on being used
		return r, err
	}
	return r, l.note(ctx, now, "deleteall", "DeleteAll: the alarm went with the tables", "")
}

// HitResult is one hit of the original's /hit.
type HitResult struct {
	ArmedNew bool  `json:"armedNew"`
	AlarmAt  int64 `json:"alarmAt"`
}

// Hit counts one hit and arms the flush only if no alarm is pending: the
// debounce (A4). Re-arming on every hit would postpone the flush for as
// long as the hits keep coming.
func (l *Lab) Hit(ctx context.Context) (HitResult, error) {
	l.woke()
	if _, err := l.st.Storage().Exec(ctx, "UPDATE pending SET n = n + 1 WHERE id = 1"); err != nil {
		return HitResult{}, err
	}
	at, err := l.alarmMS(ctx)
	if err != nil || at != nil {
		return HitResult{AlarmAt: deref(at)}, err
	}
	now := l.st.Now()
	ms, err := l.setAlarm(ctx, now.Add(l.debounce))
	if err != nil {
		return HitResult{}, err
	}
	return HitResult{ArmedNew: true, AlarmAt: ms}, l.note(ctx, now, "arm", fmt.Sprintf("debounce: flush in %v", l.debounce), "")
}

// Arm sets the alarm d from now, replacing any pending one.
func (l *Lab) Arm(ctx context.Context, d time.Duration) (int64, error) {
	l.woke()
	now := l.st.Now()
	ms, err := l.setAlarm(ctx, now.Add(d))
	if err != nil {
		return 0, err
	}
	return ms, l.note(ctx, now, "arm", fmt.Sprintf("alarm in %v", d), "")
}

// SetMode switches the alarm handler between modeOK, modeThrow and
// modeFlaky.
func (l *Lab) SetMode(ctx context.Context, mode string) error {
	l.woke()
	if err := l.st.Storage().Put(ctx, "mode", []byte(mode)); err != nil {
		return err
	}
	return l.note(ctx, l.st.Now(), "mode", "mode="+mode, "")
}

// Mode returns the alarm handler's mode.
func (l *Lab) Mode(ctx context.Context) (string, error) {
	v, ok, err := l.st.Storage().Get(ctx, "mode")
	if err != nil || !ok {
		return modeOK, err
	}
	return string(v), nil
}

// LabEvent is one entry of the lab's log.
type LabEvent struct {
	Kind   string `json:"kind"`
	Note   string `json:"note"`
	At     int64  `json:"at"` // unix ms
	Detail string `json:"detail,omitempty"`
}

// LabState is the original's /state; Timeline is filled only on request.
type LabState struct {
	Alarm    *int64     `json:"alarm"`
	Pending  int        `json:"pending"`
	Events   []LabEvent `json:"events"`             // the original's: alarm runs and flushes
	Mode     string     `json:"mode,omitempty"`     // with the timeline
	Timeline []LabEvent `json:"timeline,omitempty"` // every event, with details
}

// State returns the pending alarm, the hits not yet flushed and the log:
// the original's events (alarm runs and flushes) and, with timeline, every
// event.
func (l *Lab) State(ctx context.Context, timeline bool) (LabState, error) {
	l.woke()
	var r LabState
	var err error
	if r.Alarm, err = l.alarmMS(ctx); err != nil {
		return r, err
	}
	s := l.st.Storage()
	if err := s.QueryRow(ctx, "SELECT n FROM pending WHERE id = 1").Scan(&r.Pending); err != nil {
		return r, err
	}
	rows, err := s.Query(ctx, "SELECT kind, note, at, detail FROM events ORDER BY seq")
	if err != nil {
		return r, err
	}
	defer rows.Close()
	r.Events = []LabEvent{}
	for rows.Next() {
		var e LabEvent
		if err := rows.Scan(&e.Kind, &e.Note, &e.At, &e.Detail); err != nil {
			return r, err
		}
		if timeline {
			r.Timeline = append(r.Timeline, e)
		}
		if e.Kind == "alarm" || e.Kind == "flush" {
			e.Detail = ""
			r.Events = append(r.Events, e)
		}
	}
	if err := rows.Err(); err != nil {
		return r, err
	}
	if timeline {
		if r.Timeline == nil {
			r.Timeline = []LabEvent{}
		}
		if r.Mode, err = l.Mode(ctx); err != nil {
			return r, err
		}
	}
	return r, nil
}

// errThrow is what the alarm handler fails with in modeThrow and modeFlaky.
var errThrow = errors.New("lab: the alarm handler throws")

// Alarm logs the run as the original does ("retryCount=0 isRetry=false
// mode=ok"), then fails or flushes according to the mode. A failed run is
// rolled back, so before failing it commits its log entries with an empty
// Await (which commits the turn so far): the attempts stay visible.
func (l *Lab) Alarm(ctx context.Context, info core.AlarmInfo) error {
	fresh := l.woke()
	now := l.st.Now()
	mode, err := l.Mode(ctx)
	if err != nil {
		return err
	}
	during, err := l.alarmMS(ctx) // A13: none while the alarm runs
	if err != nil {
		return err
	}
	detail := fmt.Sprintf("name=%s getAlarm()=%s", l.st.Name(), msString(during))
	if fresh {
		detail += "; constructor ran first (the alarm woke the object)"
	}
	if err := l.note(ctx, now, "alarm", fmt.Sprintf("retryCount=%d isRetry=%t mode=%s", info.RetryCount, info.IsRetry, mode), detail); err != nil {
		return err
	}
	if mode == modeThrow || mode == modeFlaky && info.RetryCount < 2 {
		kind, note := "fail", fmt.Sprintf("threw: retry %d of %d follows", info.RetryCount+1, info.MaxRetries)
		if info.LastAttempt() {
			kind, note = "drop", fmt.Sprintf("threw on the last attempt (%d runs): the alarm goes to the dead-letter table", info.RetryCount+1)
		}
		if err := l.note(ctx, now, kind, note, ""); err != nil {
			return err
		}
		if err := l.st.Await(ctx, func(context.Context) error { return nil }); err != nil {
			return err
		}
		return fmt.Errorf("%w (mode=%s, retryCount=%d)", errThrow, mode, info.RetryCount)
	}
	var n int
	s := l.st.Storage()
	if err := s.QueryRow(ctx, "SELECT n FROM pending WHERE id = 1").Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := l.note(ctx, now, "flush", fmt.Sprintf("n=%d", n), ""); err != nil {
		return err
	}
	_, err = s.Exec(ctx, "UPDATE pending SET n = 0 WHERE id = 1")
	return err
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func msString(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
