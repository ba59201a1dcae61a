package core

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// An object's timers live in its own database, in _durable_timers: the
// alarm (owner "", key ""), the entries of its schedule (owner "", key
// given), and later its facets' alarms (owner = the facet's path). The one
// real alarm, the runtime's index, always points at the earliest of them
// (SEMANTICS A1, F5). Each row keeps its own retry state.
const timersSchema = `CREATE TABLE IF NOT EXISTS _durable_timers(
  owner TEXT NOT NULL, key TEXT NOT NULL,
  at INTEGER NOT NULL, retry INTEGER NOT NULL, first INTEGER NOT NULL,
  kind TEXT NOT NULL, payload BLOB, cron TEXT NOT NULL, missed INTEGER NOT NULL,
  PRIMARY KEY(owner, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS _durable_timers_at ON _durable_timers(at)`

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
}

// with returns the row due again at a new tick, its retries reset.
func (r timerRow) with(at int64) timerRow {
	r.at, r.first, r.retry = at, at, 0
	return r
}

// same reports whether two rows are the same timer in the same state.
func (r timerRow) same(o timerRow) bool {
	return r.owner == o.owner && r.key == o.key && r.at == o.at && r.retry == o.retry &&
		r.first == o.first && r.kind == o.kind && string(r.payload) == string(o.payload) &&
		r.cron == o.cron && r.missed == o.missed
}

const timerCols = "owner, key, at, retry, first, kind, payload, cron, missed"

func scanTimer(sc interface{ Scan(...any) error }) (timerRow, error) {
	var r timerRow
	err := sc.Scan(&r.owner, &r.key, &r.at, &r.retry, &r.first, &r.kind, &r.payload, &r.cron, &r.missed)
	return r, err
}

// putTimer writes a timer in the current segment. It counts as a row
// written (A11).
func (o *object) putTimer(r timerRow) error {
	s, err := o.state.Storage().begin()
	if err != nil {
		return err
	}
	o.batch.dirty = true
	if err := s.execInternal("INSERT OR REPLACE INTO _durable_timers("+timerCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		r.owner, r.key, r.at, r.retry, r.first, r.kind, r.payload, r.cron, r.missed); err != nil {
		return err
	}
	o.writes.Add(1)
	o.segTimers = true
	return nil
}

func (o *object) delTimer(owner, key string) (bool, error) {
	s, err := o.state.Storage().begin()
	if err != nil {
		return false, err
	}
	o.batch.dirty = true
	res, err := s.execInternalResult("DELETE FROM _durable_timers WHERE owner = ? AND key = ?", owner, key)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	o.segTimers = true
	return n > 0, nil
}

func (o *object) queryTimers(query string, args ...any) ([]timerRow, error) {
	s, err := o.state.Storage().begin()
	if err != nil {
		return nil, err
	}
	s.internal = true
	defer func() { s.internal = false }()
	stmt, err := s.ownStmt(query)
	if err != nil {
		return nil, err
	}
	rows, err := stmt.Query(args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []timerRow
	for rows.Next() {
		r, err := scanTimer(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (o *object) getTimer(owner, key string) (timerRow, bool, error) {
	rs, err := o.queryTimers("SELECT "+timerCols+" FROM _durable_timers WHERE owner = ? AND key = ?", owner, key)
	if err != nil || len(rs) == 0 {
		return timerRow{}, false, err
	}
	return rs[0], true, nil
}

// dueTimer returns the earliest timer due at now that is not in skip.
func (o *object) dueTimer(now int64, skip map[timerKey]bool) (timerRow, bool, error) {
	rs, err := o.queryTimers("SELECT "+timerCols+" FROM _durable_timers WHERE at <= ? ORDER BY at, owner, key LIMIT ?", now, len(skip)+1)
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

// nextTimer returns the earliest due time of all the object's timers.
func (o *object) nextTimer() (int64, bool, error) {
	if _, err := o.state.Storage().begin(); err != nil {
		return 0, false, err
	}
	return o.nextTimerInBatch()
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

var errNoTimerHandler = errors.New("core: object does not implement core.TimerHandler")

func (o *object) callTimerHandler(ctx contextT, inst any, row timerRow, info AlarmInfo) error {
	h, ok := inst.(TimerHandler)
	if !ok {
		return fmt.Errorf("%w (%s)", errNoTimerHandler, o.ns.name)
	}
	return h.OnTimer(ctx, Timer{
		Key: row.key, Kind: row.kind, Payload: row.payload, At: time.Unix(0, row.at),
		Cron: row.cron, Missed: row.missed,
	}, info)
}

// nextTimerInBatch is nextTimer for the commit path, outside any segment
// (the transaction is open).
func (o *object) nextTimerInBatch() (int64, bool, error) {
	s := o.store
	s.internal = true
	defer func() { s.internal = false }()
	stmt, err := s.ownStmt("SELECT min(at) FROM _durable_timers")
	if err != nil {
		return 0, false, err
	}
	var at sql.NullInt64
	if err := stmt.QueryRow().Scan(&at); err != nil {
		return 0, false, err
	}
	return at.Int64, at.Valid, nil
}

// The timer operations of State: a top-level object's timers are in its
// own table; a facet's are in its root's, under its path (facet.go).

func (o *object) timerPut(r timerRow) error {
	if o.facet == nil {
		return o.putTimer(r)
	}
	r.owner = o.facet.owner
	return o.rootDo(func(root *object) error { return root.putTimer(r) })
}

func (o *object) timerGet(key string) (r timerRow, ok bool, err error) {
	if o.facet == nil {
		return o.getTimer("", key)
	}
	err = o.rootDo(func(root *object) error {
		r, ok, err = root.getTimer(o.facet.owner, key)
		return err
	})
	return r, ok, err
}

func (o *object) timerDel(key string) (ok bool, err error) {
	if o.facet == nil {
		return o.delTimer("", key)
	}
	err = o.rootDo(func(root *object) error {
		ok, err = root.delTimer(o.facet.owner, key)
		return err
	})
	return ok, err
}

func (o *object) timerList() (rs []timerRow, err error) {
	const q = "SELECT " + timerCols + " FROM _durable_timers WHERE owner = ? AND key <> '' ORDER BY at, key"
	if o.facet == nil {
		return o.queryTimers(q, "")
	}
	err = o.rootDo(func(root *object) error {
		rs, err = root.queryTimers(q, o.facet.owner)
		return err
	})
	return rs, err
}
