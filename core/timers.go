package core

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
)

// An object's timers live in its own database, in _durable_timers: the alarm (owner "", key ""),
// its schedule's entries (owner "", key given), and its facets' alarms and schedules (owner = the
// facet's path). The one real alarm, the runtime's index, points at the earliest (SEMANTICS A1,
// F5). Each row has its own retry state. A row being run is marked running, not removed, until the
// run's last segment commits: after a crash it runs again.
const timersSchema = `CREATE TABLE IF NOT EXISTS main._durable_timers(
  owner TEXT NOT NULL, key TEXT NOT NULL,
  at INTEGER NOT NULL, retry INTEGER NOT NULL, first INTEGER NOT NULL,
  kind TEXT NOT NULL, payload BLOB, cron TEXT NOT NULL, missed INTEGER NOT NULL,
  running INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(owner, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS main._durable_timers_at ON _durable_timers(at)`

// timersUpgrade adds the running column to a timers table made by an earlier version.
const timersUpgrade = `ALTER TABLE main._durable_timers ADD COLUMN running INTEGER NOT NULL DEFAULT 0`

type timerKey struct{ owner, key string }

type timerRow struct {
	owner, key string
	at         int64 // due (unix ns)
	retry      int   // retries made so far for this due time
	first      int64 // when first due, for AlarmInfo.Scheduled and dead letters
	kind       string
	payload    []byte
	cron       string
	missed     Missed
	running    bool  // a run of it has begun and not ended
	token      int64 // while running, a facet's run's identity (facet.go); 0 otherwise
}

// runningValue is what the running column holds: 0, or the run's token (1 when it has none).
func (r timerRow) runningValue() int64 {
	switch {
	case !r.running:
		return 0
	case r.token != 0:
		return r.token
	}
	return 1
}

// scan reads a row of timerCols.
func (r *timerRow) scan(rows *sql.Rows) error {
	var running int64
	err := rows.Scan(&r.owner, &r.key, &r.at, &r.retry, &r.first, &r.kind, &r.payload, &r.cron, &r.missed, &running)
	r.running = running != 0
	if running != 1 {
		r.token = running
	}
	return err
}

// with returns the row due again at a new tick, its retries reset.
func (r timerRow) with(at int64) timerRow {
	r.at, r.first, r.retry, r.running = at, at, 0, false
	return r
}

// same reports whether two rows are the same timer in the same state, running or not.
func (r timerRow) same(o timerRow) bool {
	return r.owner == o.owner && r.key == o.key && r.at == o.at && r.retry == o.retry &&
		r.first == o.first && r.kind == o.kind && string(r.payload) == string(o.payload) &&
		r.cron == o.cron && r.missed == o.missed
}

func (r timerRow) timer() Timer {
	return Timer{Key: r.key, Kind: r.kind, Payload: r.payload, At: time.Unix(0, r.at), Cron: r.cron, Missed: r.missed}
}

const timerCols = "owner, key, at, retry, first, kind, payload, cron, missed, running"

// timerHome is whose table holds an object's timers: its root object's (itself, for a top-level
// object), under its path there ("" for the root itself).
type timerHome struct {
	ns       *namespace
	name, id string
	owner    string
}

// timerTable runs fn on the table that holds t's object's timers, with the object's path in it: in
// t's own segment, or, for a facet, as a turn of its root, committed at once (facet.go).
func (t *turn) timerTable(fn func(home *turn, owner string) error) error {
	h := t.o.place.timers
	if h.owner == "" {
		return fn(t, "")
	}
	return h.ns.with(h.name, h.id, placement{}, func(root *object) error {
		return root.run(t, func(ctx context.Context, _ any) error { return fn(ctx.(*turn), h.owner) })
	})
}

// onTimers is timerTable for the turn ctx marks, which must be one of st's object.
func (st *State) onTimers(ctx context.Context, fn func(home *turn, owner string) error) error {
	t, err := st.o.inTurn(ctx)
	if err != nil {
		return err
	}
	return t.timerTable(fn)
}

// putTimer writes a timer in the segment. It counts as a row written (A11).
func (t *turn) putTimer(r timerRow) error {
	if fr := t.facetRun(r.owner, r.key); fr != nil { // decided with the facet's run
		fr.set, fr.next = true, &r
		return nil
	}
	s, err := t.write()
	if err != nil {
		return err
	}
	if err := s.ExecOwn("INSERT OR REPLACE INTO main._durable_timers("+timerCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		r.owner, r.key, r.at, r.retry, r.first, r.kind, r.payload, r.cron, r.missed, r.runningValue()); err != nil {
		return err
	}
	t.o.writes.Add(1)
	t.timers = true
	return nil
}

// delTimers deletes owner's timer key or, with all, every timer of owner and of the facets below.
func (t *turn) delTimers(owner, key string, all bool) (bool, error) {
	if fr := t.facetRun(owner, key); fr != nil && !all { // decided with the facet's run
		had := !fr.set || fr.next != nil
		fr.set, fr.next = true, nil
		return had, nil
	}
	s, err := t.write()
	if err != nil {
		return false, err
	}
	q, args := "DELETE FROM main._durable_timers WHERE owner = ? AND key = ?", []any{owner, key}
	if all {
		q, args = "DELETE FROM main._durable_timers WHERE owner = ? OR substr(owner, 1, ?) = ?", []any{owner, len(owner) + 1, owner + "/"}
	}
	res, err := s.ExecOwnResult(q, args...)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	t.timers = true
	return n > 0, nil
}

func (t *turn) queryTimers(where string, args ...any) ([]timerRow, error) {
	s, err := t.db()
	if err != nil {
		return nil, err
	}
	var out []timerRow
	err = s.QueryOwn("SELECT "+timerCols+" FROM main._durable_timers WHERE "+where, args, func(rows *sql.Rows) error {
		var r timerRow
		err := r.scan(rows)
		out = append(out, r)
		return err
	})
	return out, err
}

func (t *turn) getTimer(owner, key string) (timerRow, bool, error) {
	if fr := t.facetRun(owner, key); fr != nil && fr.set {
		if fr.next == nil {
			return timerRow{}, false, nil
		}
		return *fr.next, true, nil
	}
	rs, err := t.queryTimers("owner = ? AND key = ?", owner, key)
	if err != nil || len(rs) == 0 {
		return timerRow{}, false, err
	}
	return rs[0], true, nil
}

// dueTimer returns the earliest timer due at now that is not in skip.
func (t *turn) dueTimer(now int64, skip map[timerKey]bool) (timerRow, bool, error) {
	rs, err := t.queryTimers("at <= ? ORDER BY at, owner, key LIMIT ?", now, len(skip)+1)
	if err != nil {
		return timerRow{}, false, err
	}
	for _, r := range rs {
		if !skip[timerKey{r.owner, r.key}] {
			return r, true, nil
		}
	}
	return timerRow{}, false, nil
}

// listTimers returns owner's pending schedule entries; a running recurring one is at its next tick.
func (t *turn) listTimers(owner string) ([]Timer, error) {
	rs, err := t.queryTimers("owner = ? AND key <> '' ORDER BY at, key", owner)
	if fr := t.facetRunOf(owner); fr != nil && fr.set && fr.key != "" { // as its run left it
		rs = slices.DeleteFunc(rs, func(r timerRow) bool { return r.key == fr.key })
		if fr.next != nil {
			rs = append(rs, *fr.next)
			slices.SortFunc(rs, func(a, b timerRow) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.key, b.key)) })
		}
	}
	var out []Timer
	for _, r := range rs {
		if r.running {
			if r.cron == "" {
				continue
			}
			next, err := nextTick(r.cron, t.o.rt.now())
			if err != nil {
				continue
			}
			r.at = next.UnixNano()
		}
		out = append(out, r.timer())
	}
	return out, err
}

// nextTick returns the first tick of a cron spec after t.
func nextTick(spec string, t time.Time) (time.Time, error) {
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return time.Time{}, fmt.Errorf("core: cron spec %q: %w", spec, err)
	}
	next := sched.Next(t)
	if next.IsZero() {
		return time.Time{}, fmt.Errorf("core: cron spec %q never fires", spec)
	}
	return next, nil
}

// callHandler runs the handler of a due timer: Alarm for the alarm, OnTimer for a schedule entry.
func callHandler(ctx context.Context, ns *namespace, inst any, row timerRow, info AlarmInfo) error {
	if row.key == "" {
		h, ok := inst.(Alarmer)
		if !ok {
			return fmt.Errorf("core: %s objects do not implement core.Alarmer", ns.name)
		}
		return h.Alarm(ctx, info)
	}
	h, ok := inst.(TimerHandler)
	if !ok {
		return fmt.Errorf("core: object does not implement core.TimerHandler (%s)", ns.name)
	}
	return h.OnTimer(ctx, row.timer(), info)
}
