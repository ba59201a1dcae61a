package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/runindex"
	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// Inspection (Admin.Inspect, Admin.Query, Admin.Check) reads what the runtime keeps without
// changing any of it; see Admin for how it reaches an object.

// ObjectReport is what Inspect finds in one object.
type ObjectReport struct {
	Namespace, Name, ID string
	File                string          // its database, relative to the data directory
	Size                int64           // bytes of its database and WAL
	Created             time.Time       // when its database was created
	Resident            bool            // its instance is in memory
	Tables              []TableInfo     // its tables, the runtime's (_durable_*) included, by name
	Alarm               time.Time       // its alarm (zero if none)
	Timers              []TimerInfo     // every timer of its table (the alarm included), by due time
	DeadLetters         []DeadLetter    // its letters in the dead-letter table
	WebSockets          []WebSocketInfo // its open connections, in accept order
}

// TableInfo describes one table.
type TableInfo struct {
	Name    string
	Columns []string
	Rows    int64
	Runtime bool // one of the runtime's own tables (_durable_*)
}

// TimerInfo is one timer with its retry state: the object's alarm has an empty Key, a facet's
// timer a Path.
type TimerInfo struct {
	Path, Key, Kind string
	At              time.Time // when it runs next
	Scheduled       time.Time // when it was first due (before retries)
	Retries         int       // retries made for this due time
	Running         bool      // a run has begun and not ended
	Cron            string    // its recurrence, if any
	Payload         []byte
}

// WebSocketInfo describes an open WebSocket.
type WebSocketInfo struct {
	Tags       []string
	Attachment json.RawMessage // nil if none
}

// QueryResult is the answer of a read-only query: at most the limit's rows, Truncated if there
// were more.
type QueryResult struct {
	Columns   []string
	Rows      [][]any // SQLite's values: int64, float64, string, []byte or nil
	Truncated bool
}

// Problem is one thing Check found wrong.
type Problem struct {
	Namespace, Name string
	File            string // relative to the data directory
	Problem         string
}

// Namespaces lists the namespaces with at least one object in the catalog, registered or not.
func (a *Admin) Namespaces() ([]string, error) {
	rt := a.rt
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	return rt.ix.Namespaces()
}

// Objects is Namespace.List for any namespace of the catalog, registered or not; a facet kind's
// objects are listed under "<parent>.<kind>".
func (a *Admin) Objects(ctx context.Context, nsName string, opts ObjectListOptions) ([]ObjectInfo, error) {
	rt := a.rt
	rt.mu.RLock()
	ns := rt.namespaces[nsName]
	rt.mu.RUnlock()
	if ns == nil { // not registered, or a facet kind ("<parent>.<kind>")
		if nsName == "" {
			return nil, fmt.Errorf("%w: empty namespace", ErrInvalidName)
		}
		ns = &namespace{rt: rt, name: nsName}
	}
	return (&Namespace[any]{ns: ns}).List(ctx, opts)
}

// Inspect reports what the object holds. It waits for the object's gate if its namespace is
// registered; it fails with ErrNoObject for an object without storage.
func (a *Admin) Inspect(ctx context.Context, namespace, name string) (ObjectReport, error) {
	rt := a.rt
	var rep ObjectReport
	err := rt.readObject(ctx, "inspect", namespace, name, func(e runindex.Object, r *sqlstore.ReadOnly, o *object) error {
		var err error
		rep, err = rt.report(ctx, e, r, o)
		return err
	})
	return rep, err
}

// Query runs a read-only SQL query on the object's database, in a turn of its own (see Inspect),
// returning at most limit rows (100 if limit <= 0, at most MaxQueryRows). A statement that would
// change anything (INSERT, UPDATE, DELETE, DDL, ATTACH, a transaction, a PRAGMA that sets) fails
// with ErrReadOnly naming what was refused, and changes nothing. The runtime's tables may be read.
func (a *Admin) Query(ctx context.Context, namespace, name string, limit int, query string, args ...any) (QueryResult, error) {
	rt := a.rt
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxQueryRows)
	var res QueryResult
	err := rt.readObject(ctx, "query", namespace, name, func(_ runindex.Object, r *sqlstore.ReadOnly, _ *object) error {
		if strings.TrimSpace(query) == "" {
			return ErrNoStatement
		}
		if n, _ := sqlstore.Params(query); n != len(args) {
			return fmt.Errorf("%w: the query has %d parameters, %d arguments given", ErrArgCount, n, len(args))
		}
		errFull := errors.New("full")
		err := r.Query(ctx, query, args, func(rows *sql.Rows) error {
			if res.Columns == nil {
				cols, err := rows.Columns()
				if err != nil {
					return err
				}
				res.Columns = cols
			}
			if len(res.Rows) == limit {
				res.Truncated = true
				return errFull
			}
			vals := make([]any, len(res.Columns))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return err
			}
			res.Rows = append(res.Rows, vals)
			return nil
		})
		switch {
		case errors.Is(err, errFull):
			return nil
		case errors.Is(err, sqlstore.ErrWrite):
			return fmt.Errorf("%w: %w", ErrReadOnly, err)
		case err != nil && strings.Contains(err.Error(), "readonly"):
			return fmt.Errorf("%w: %w", ErrReadOnly, err)
		}
		return err
	})
	return res, err
}

// Check checks every database of the directory and the alarm index: the runtime's file and each
// object's pass SQLite's integrity check, every object the catalog lists has its file, and each
// object's earliest timer is the alarm the index holds for it (and the index none for an object
// without timers). It returns what it found wrong; an error means it could not finish.
func (a *Admin) Check(ctx context.Context) ([]Problem, error) {
	rt := a.rt
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	ix := rt.ix
	var out []Problem
	verdict, err := ix.Check()
	if err != nil {
		return nil, fmt.Errorf("core: check: %w", err)
	}
	if verdict != "ok" {
		out = append(out, Problem{File: datadir.IndexFile, Problem: "integrity check: " + verdict})
	}
	type key struct{ ns, id string }
	type indexed struct {
		name string
		at   int64
	}
	alarms := map[key]indexed{}
	if err := ix.Load(func(ns, id, name string, at int64) { alarms[key{ns, id}] = indexed{name, at} }); err != nil {
		return nil, fmt.Errorf("core: check: %w", err)
	}
	entries, err := ix.List("", "", 0)
	if err != nil {
		return nil, fmt.Errorf("core: check: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		bad := func(format string, a ...any) {
			out = append(out, Problem{Namespace: e.Namespace, Name: e.Name, File: e.File, Problem: fmt.Sprintf(format, a...)})
		}
		if datadir.FileSize(filepath.Join(rt.dir, e.File)) == 0 {
			bad("database missing or empty")
			delete(alarms, key{e.Namespace, e.ID})
			continue
		}
		var verdict string
		var next sql.NullInt64
		err := rt.readEntry(ctx, e, func(r *sqlstore.ReadOnly, _ *object) error {
			if err := r.Query(ctx, "PRAGMA integrity_check(1)", nil, func(rows *sql.Rows) error { return rows.Scan(&verdict) }); err != nil {
				return err
			}
			if verdict != "ok" {
				return nil
			}
			return r.Query(ctx, "SELECT min(at) FROM main._durable_timers", nil, func(rows *sql.Rows) error { return rows.Scan(&next) })
		})
		switch {
		case err != nil:
			bad("cannot read: %v", err)
		case verdict != "ok":
			bad("integrity check: %s", verdict)
		default:
			got, ok := alarms[key{e.Namespace, e.ID}]
			switch {
			case next.Valid && !ok:
				bad("its timers are due at %s; the alarm index has no alarm for it", fmtTime(next.Int64))
			case next.Valid && got.at != next.Int64:
				bad("its timers are due at %s; the alarm index says %s", fmtTime(next.Int64), fmtTime(got.at))
			case !next.Valid && ok:
				bad("the alarm index has an alarm at %s; the object has no timer", fmtTime(got.at))
			}
		}
		delete(alarms, key{e.Namespace, e.ID})
	}
	for k, a := range alarms {
		out = append(out, Problem{Namespace: k.ns, Name: a.name, Problem: fmt.Sprintf("the alarm index has an alarm at %s for an object the catalog does not list", fmtTime(a.at))})
	}
	return out, nil
}

func fmtTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// readObject runs fn on a read-only connection to the named object's database; see readEntry.
func (rt *Runtime) readObject(ctx context.Context, op, namespace, name string, fn func(e runindex.Object, r *sqlstore.ReadOnly, o *object) error) error {
	fail := func(err error) error { return &Error{Op: op, Namespace: namespace, Name: name, Err: err} }
	e, err := rt.lookup(namespace, name)
	if err != nil {
		return fail(err)
	}
	if err := rt.readEntry(ctx, e, func(r *sqlstore.ReadOnly, o *object) error { return fn(e, r, o) }); err != nil {
		return fail(err)
	}
	return nil
}

// lookup finds the named object in the catalog, registered or not; a facet's namespace is
// "<parent>.<kind>". An object the catalog does not list is ErrNoObject.
func (rt *Runtime) lookup(namespace, name string) (runindex.Object, error) {
	if rt.isClosed.Load() {
		return runindex.Object{}, ErrClosed
	}
	if namespace == "" {
		return runindex.Object{}, fmt.Errorf("%w: empty namespace", ErrInvalidName)
	}
	if err := validateName(name); err != nil {
		return runindex.Object{}, err
	}
	e, known, err := rt.ix.LookupName(namespace, name)
	if err == nil && !known {
		err = ErrNoObject
	}
	return e, err
}

// readEntry runs fn on a read-only connection to the catalog entry's database: holding the
// object's gate, as a turn that builds no instance, if its namespace is registered (o is then the
// object); straight from the file otherwise (o is nil). An open database holds its file alone
// (sqlstore.Open): the object's, or a resident facet's, is closed first, its gate held (its next
// turn opens it again); a file no object has open may be read at once (an activation that comes
// meanwhile waits for it, by SQLite's busy timeout).
func (rt *Runtime) readEntry(ctx context.Context, e runindex.Object, fn func(r *sqlstore.ReadOnly, o *object) error) error {
	read := func(o, held *object) error {
		path := filepath.Join(rt.dir, e.File)
		if held != nil {
			if err := held.closeDB(); err != nil {
				return err
			}
			held.ns.waitClosed(held.id)
		}
		if datadir.FileSize(path) == 0 {
			return &DamagedError{Path: path, Reason: "missing or empty"}
		}
		r, err := sqlstore.OpenReadOnly(path)
		if err != nil {
			return err
		}
		defer r.Close()
		return fn(r, o)
	}
	rt.mu.RLock()
	ns := rt.namespaces[e.Namespace]
	rt.mu.RUnlock()
	if ns == nil {
		for {
			f := rt.liveFacet(e)
			if f == nil {
				return read(nil, nil)
			}
			if err := f.hold(ctx, func() error { return read(nil, f) }); err != errEvicted {
				return err
			}
		}
	}
	if err := rt.enter(); err != nil {
		return err
	}
	defer rt.leave()
	return viaCaller(ctx, func(ctx context.Context) error {
		return ns.with(e.Name, e.ID, placement{}, func(o *object) error {
			return o.hold(ctx, func() error { return read(o, o) })
		})
	})
}

// liveFacet returns the resident facet object a catalog entry of a facet kind names, or nil.
func (rt *Runtime) liveFacet(e runindex.Object) *object {
	rt.mu.RLock()
	kind := rt.facets[e.Namespace]
	rt.mu.RUnlock()
	if kind == nil {
		return nil
	}
	return kind.live(e.Name)
}

// report reads an object's report on r; o is the object, its gate held, or nil.
func (rt *Runtime) report(ctx context.Context, e runindex.Object, r *sqlstore.ReadOnly, o *object) (ObjectReport, error) {
	rep := ObjectReport{Namespace: e.Namespace, Name: e.Name, ID: e.ID, File: e.File,
		Size: datadir.FileSize(filepath.Join(rt.dir, e.File)), Created: time.Unix(0, e.Created)}
	err := r.Query(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name", nil, func(rows *sql.Rows) error {
		var t TableInfo
		err := rows.Scan(&t.Name)
		t.Runtime = strings.HasPrefix(strings.ToLower(t.Name), "_durable_")
		rep.Tables = append(rep.Tables, t)
		return err
	})
	if err != nil {
		return rep, err
	}
	hasTimers := false
	for i := range rep.Tables {
		t := &rep.Tables[i]
		hasTimers = hasTimers || t.Name == "_durable_timers"
		if err := r.Query(ctx, "SELECT name FROM pragma_table_info(?)", []any{t.Name}, func(rows *sql.Rows) error {
			var c string
			err := rows.Scan(&c)
			t.Columns = append(t.Columns, c)
			return err
		}); err != nil {
			return rep, err
		}
		q := `SELECT count(*) FROM main."` + strings.ReplaceAll(t.Name, `"`, `""`) + `"`
		if err := r.Query(ctx, q, nil, func(rows *sql.Rows) error { return rows.Scan(&t.Rows) }); err != nil {
			return rep, err
		}
	}
	if hasTimers {
		err := r.Query(ctx, "SELECT "+timerCols+" FROM main._durable_timers ORDER BY at, owner, key", nil, func(rows *sql.Rows) error {
			var t timerRow
			if err := t.scan(rows); err != nil {
				return err
			}
			rep.Timers = append(rep.Timers, TimerInfo{Path: t.owner, Key: t.key, Kind: t.kind, At: time.Unix(0, t.at),
				Scheduled: time.Unix(0, t.first), Retries: t.retry, Running: t.running, Cron: t.cron, Payload: t.payload})
			if t.owner == "" && t.key == "" {
				rep.Alarm = time.Unix(0, t.at)
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
	}
	letters, err := rt.ix.Letters()
	if err != nil {
		return rep, err
	}
	for _, l := range letters {
		if l.Namespace == e.Namespace && l.ObjectID == e.ID {
			rep.DeadLetters = append(rep.DeadLetters, DeadLetter(l))
		}
	}
	if o != nil {
		rep.Resident = o.hasInstance()
		for _, ws := range rt.ws.list(o.ns, o.name, "") {
			info := WebSocketInfo{Tags: ws.Tags()}
			if a, err := ws.Attachment(); err == nil && len(a) > 0 {
				info.Attachment = a
			}
			rep.WebSockets = append(rep.WebSockets, info)
		}
	}
	return rep, nil
}

// offline runs fn as a turn of an object of a namespace this runtime has not registered: a
// transient namespace holds the object for the turn (no constructor runs, no instance is built),
// and its database is closed after it. Its timers are committed to the index like any object's;
// the scheduler keeps them until the namespace is registered.
func (rt *Runtime) offline(ctx context.Context, nsName, name, id string, fn func(context.Context, any) error) error {
	ns := &namespace{rt: rt, name: nsName, dir: datadir.NamespaceDir(rt.dir, nsName), stat: new(telemetry.Namespace),
		objects: make(map[string]*object), closing: make(map[string]chan struct{})}
	o := ns.object(name, id, placement{})
	err := o.hold(ctx, func() error {
		return o.runTurnNoCtor(func(t *turn) error { return o.invoke(t, fn) })
	})
	if o.tryEvict() {
		if cerr := o.closeRemoved(o.detach()); err == nil {
			err = cerr
		}
	}
	return err
}
