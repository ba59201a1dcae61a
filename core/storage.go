package core

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/durable-go/durable/core/internal/sqlstore"
)

// Storage is an object's own SQLite database, bound to its current turn; outside a turn its methods
// fail with ErrNotInTurn. Every call runs in the turn's savepoint: the turn's writes commit
// together (with other turns' in one group commit) or not at all. Storage calls never open the
// input gate: a read and a write with no Await between them cannot be interleaved with another
// turn. Statements are prepared once per query text and cached: pass values as ? arguments.
//
// SQL: Exec, Query, QueryRow (the first row, as database/sql) and One (exactly one row); errors
// carry SQLite's text; values are stored exactly (an int64 keeps every digit, a bool is 0 or 1, a
// struct is refused); Transaction nests a transaction in the turn. KV: Get, Put, Delete, their
// batch forms and List with the original's options, within MaxKeyLen, MaxValueLen and MaxBatchKeys.
// Migrate runs the object's schema steps once each; DeleteAll empties the object.
type Storage struct {
	o      *object
	params map[string]int // the parameters of each query seen (-1: no statement), for checkArgs
}

// Result describes the effect of Exec.
type Result struct {
	RowsAffected int64 // rows changed by the last INSERT, UPDATE or DELETE
	LastInsertID int64 // rowid of the last row inserted
}

// StorageStats are an object's billing units over its life in this process: rows read (returned to
// its code) and rows written (changed by its statements, KV writes and SetAlarm).
type StorageStats struct{ RowsRead, RowsWritten int64 }

// Stats returns the object's counters. It may be called at any time.
func (s *Storage) Stats() StorageStats {
	return StorageStats{RowsRead: s.o.reads.Load(), RowsWritten: s.o.writes.Load()}
}

// maxParamsCached bounds the queries whose parameter counts an object keeps.
const maxParamsCached = 256

// runtimeSchema is the runtime's own tables in every object database.
const runtimeSchema = `CREATE TABLE IF NOT EXISTS main._durable_meta(k TEXT PRIMARY KEY, v ANY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS main._durable_kv(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
` + timersSchema

type store = sqlstore.DB

// schemaMark is the user_version of an object database whose runtime tables are set up, as this
// version makes them (the name record written, the timers table with its running column): the
// batch that sets them up sets it (markSchema), and user SQL cannot (the authorizer lets it read
// user_version, not set it). Opening a file that carries it reads no more than that; a file without
// it (new, or made by an earlier version) is read the long way. A later change to the runtime's
// tables that an open must bring up to date takes the next number.
const schemaMark = 1

// markSchema is the statement that marks a database's runtime tables as set up (schemaMark).
const markSchema = "PRAGMA main.user_version = 1"

// openStore opens an object's database, checked by check if it is not nil (sqlstore.OpenChecked),
// bringing the runtime's tables of an earlier version up to date; fresh says they are not set up
// yet.
func openStore(path, synchronous string, template func() ([]byte, error), check sqlstore.FileCheck) (st *store, fresh bool, err error) {
	if st, err = sqlstore.OpenChecked(path, synchronous, "_durable_", template, check); err != nil {
		return nil, false, err
	}
	var mark int
	if err = st.QueryOwn("PRAGMA main.user_version", nil, func(r *sql.Rows) error { return r.Scan(&mark) }); err != nil {
		st.Close()
		return nil, false, err
	}
	if mark == schemaMark {
		return st, false, nil
	}
	// The timers table's CREATE statement, as SQLite keeps it (ADD COLUMN rewrites it), says whether
	// it has the running column: cheaper than pragma_table_xinfo, which every activation pays. One
	// statement reads it and the name record together; only a database from before the meta table
	// fails to prepare it ("no such table") and is read in two.
	var meta int
	var timers sql.NullString
	err = st.QueryOwn(`SELECT (SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_timers'),
  (SELECT count(*) FROM main._durable_meta WHERE k = 'name')`, nil, func(r *sql.Rows) error { return r.Scan(&timers, &meta) })
	if err != nil && strings.Contains(err.Error(), "no such table") {
		err = st.QueryOwn(`SELECT (SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_meta'),
  (SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_timers')`,
			nil, func(r *sql.Rows) error { return r.Scan(&meta, &timers) })
		if err == nil && meta == 1 {
			err = st.QueryOwn("SELECT count(*) FROM main._durable_meta WHERE k = 'name'", nil, func(r *sql.Rows) error { return r.Scan(&meta) })
		}
	}
	if err == nil && timers.Valid && !strings.Contains(timers.String, "running") {
		err = st.ExecOwn(timersUpgrade)
	}
	if err != nil {
		st.Close()
		return nil, false, err
	}
	return st, meta == 0, nil
}

// in returns t's database with its savepoint in place, if ctx marks a running turn of the object.
func (s *Storage) in(ctx context.Context) (*turn, *store, error) {
	t, err := s.o.inTurn(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := t.db()
	return t, st, err
}

// writer is in for statements that change something.
func (s *Storage) writer(ctx context.Context) (*store, error) {
	t, err := s.o.inTurn(ctx)
	if err != nil {
		return nil, err
	}
	return t.write()
}

// sqlErr gives a failed user statement a clear error.
func (s *Storage) sqlErr(st *store, query string, err error) error {
	if why := st.Denied(); why != "" {
		return fmt.Errorf("%w: %s (in %q)", ErrSQLNotAllowed, why, short(query))
	}
	return fmt.Errorf("core: sql %q: %w", short(query), err)
}

func short(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 120 {
		return q[:117] + "..."
	}
	return q
}

// checkArgs refuses a query that holds no statement, or that is given more or fewer arguments than
// it has parameters (SEMANTICS W6). Each query is scanned once, while the cache has room.
func (s *Storage) checkArgs(query string, args []any) error {
	n, ok := s.params[query]
	if !ok {
		var empty bool
		if n, empty = sqlstore.Params(query); empty {
			n = -1
		}
		if s.params == nil || len(s.params) >= maxParamsCached {
			s.params = make(map[string]int)
		}
		s.params[query] = n
	}
	if n < 0 {
		return fmt.Errorf("%w (in %q)", ErrNoStatement, short(query))
	}
	if len(args) != n {
		return fmt.Errorf("%w: %d given, the statement has %d parameters (in %q)", ErrArgCount, len(args), n, short(query))
	}
	return nil
}

// Exec runs statements that return no rows; query may hold several, separated by semicolons, all
// bound from args (each ? of each statement takes the next argument of that statement's own count:
// ?1 of every statement is args[0]). An empty query, or as many arguments as parameters not given,
// is an error.
func (s *Storage) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	st, err := s.writer(ctx)
	if err != nil {
		return Result{}, err
	}
	if err := s.checkArgs(query, args); err != nil {
		return Result{}, err
	}
	stmt, err := st.Stmt(query)
	if err != nil {
		return Result{}, s.sqlErr(st, query, err)
	}
	res, err := stmt.Exec(args...)
	if err != nil {
		return Result{}, s.sqlErr(st, query, err)
	}
	var r Result
	switch sqlstore.FirstKeyword(query) {
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH":
		r.RowsAffected, _ = res.RowsAffected()
		r.LastInsertID, _ = res.LastInsertId()
		s.o.writes.Add(r.RowsAffected)
	}
	return r, nil
}

// Query runs a statement that returns rows. The rows belong to the turn's segment: close them when
// done; those left open are closed when the segment ends (at an Await or the end of the turn).
func (s *Storage) Query(ctx context.Context, query string, args ...any) (*Rows, error) {
	t, st, err := s.in(ctx)
	if err != nil {
		return nil, err
	}
	switch sqlstore.FirstKeyword(query) {
	case "SELECT", "VALUES", "EXPLAIN", "PRAGMA":
	default:
		t.dirty() // INSERT ... RETURNING and the like
	}
	if err := s.checkArgs(query, args); err != nil {
		return nil, err
	}
	stmt, err := st.Stmt(query)
	if err != nil {
		return nil, s.sqlErr(st, query, err)
	}
	rows, err := stmt.Query(args...)
	if err != nil {
		return nil, s.sqlErr(st, query, err)
	}
	r := &Rows{rows: rows, o: s.o}
	t.rows = append(t.rows, r)
	return r, nil
}

// QueryRow runs a statement expected to return at most one row, as database/sql's QueryRow: Scan
// reads the first row and ignores any others. Errors are deferred to Row.Scan.
func (s *Storage) QueryRow(ctx context.Context, query string, args ...any) *Row {
	rows, err := s.Query(ctx, query, args...)
	return &Row{rows: rows, err: err, query: query}
}

// One runs a statement that must return exactly one row (the original's .one(), SEMANTICS W7):
// Row.Scan fails with ErrNoRows ("no results") if it returned none and with ErrMultipleResults if it
// returned more than one.
func (s *Storage) One(ctx context.Context, query string, args ...any) *Row {
	rows, err := s.Query(ctx, query, args...)
	return &Row{rows: rows, err: err, query: query, one: true}
}

// Size returns the size in bytes of the object's database as the turn sees it, the runtime's own
// tables (KV pairs, timers) included: the original's databaseSize. Pages the database has freed
// (after a DeleteAll, say) are not counted: the file keeps them for reuse, and after DeleteAll Size
// is at most a new object's (SEMANTICS W9).
func (s *Storage) Size(ctx context.Context) (int64, error) {
	_, st, err := s.in(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	err = st.QueryOwn("SELECT (c.page_count - f.freelist_count) * s.page_size FROM pragma_page_count() AS c, pragma_freelist_count() AS f, pragma_page_size() AS s", nil,
		func(r *sql.Rows) error { return r.Scan(&n) })
	if err != nil {
		return 0, fmt.Errorf("core: database size: %w", err)
	}
	return n, nil
}

// Transaction runs fn as a nested transaction inside the turn: its writes are kept if fn returns
// nil, rolled back if it returns an error (returned) or panics (re-panicked). Transactions nest.
func (s *Storage) Transaction(ctx context.Context, fn func() error) (err error) {
	t, st, err := s.in(ctx)
	if err != nil {
		return err
	}
	t.depth++
	name := fmt.Sprintf("tx%d", t.depth)
	if err := st.ExecOwn("SAVEPOINT " + name); err != nil {
		t.depth--
		return s.o.fail(err)
	}
	ok := false
	defer func() {
		if ok || !t.is(turnLive) {
			return
		}
		// A panic or an error: undo fn's writes, keep the turn going.
		t.depth--
		if rerr := st.ExecOwn("ROLLBACK TO " + name); rerr == nil {
			_ = st.ExecOwn("RELEASE " + name)
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	ok = true
	t.depth--
	if err := st.ExecOwn("RELEASE " + name); err != nil {
		return s.o.fail(err)
	}
	return nil
}

// DeleteAll deletes, in the turn (it rolls back with it), everything the object stored: every
// table, view, index and trigger, the KV pairs, the record of applied migrations (Migrate runs
// every step again), and the pending alarm (see DeleteAllKeepAlarm). It works inside Transaction.
func (s *Storage) DeleteAll(ctx context.Context) error { return s.deleteAll(ctx, false) }

// DeleteAllKeepAlarm is DeleteAll that leaves the pending alarm in place, as the original runtime
// did before 2026-02-24.
func (s *Storage) DeleteAllKeepAlarm(ctx context.Context) error { return s.deleteAll(ctx, true) }

func (s *Storage) deleteAll(ctx context.Context, keepAlarm bool) error {
	t, err := s.o.inTurn(ctx)
	if err != nil {
		return err
	}
	st, err := t.write()
	if err != nil {
		return err
	}
	o := s.o
	var drops []string
	err = st.QueryOwn(`SELECT type, name FROM main.sqlite_schema WHERE name NOT LIKE 'sqlite_%' AND name NOT IN ('_durable_meta', '_durable_wsin') AND type IN ('table', 'view') ORDER BY type = 'table'`,
		nil, func(rows *sql.Rows) error {
			var typ, name string
			err := rows.Scan(&typ, &name)
			drops = append(drops, fmt.Sprintf("DROP %s IF EXISTS main.%s", strings.ToUpper(typ), quoteIdent(name)))
			return err
		})
	if err != nil {
		return fmt.Errorf("core: delete all: %w", err)
	}
	var alarm []timerRow
	if keepAlarm && o.place.timers.owner == "" {
		if r, ok, err := t.getTimer("", ""); err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		} else if ok {
			alarm = append(alarm, r)
		}
	}
	for _, q := range append(drops, runtimeSchema) {
		if err := st.ExecOwn(q); err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		}
	}
	t.timers = true
	if err := t.deleteFacets(); err != nil {
		return err
	}
	if h := o.place.timers; h.owner != "" && !keepAlarm {
		// A facet's timers (and its facets') live in its root: they go once the deletion commits.
		t.emit(effect{fn: func(committed bool) {
			if committed {
				o.rt.goWork(func() {
					err := h.ns.with(h.name, h.id, placement{}, func(root *object) error {
						return root.run(o.rt.base, func(ctx context.Context, _ any) error {
							_, err := ctx.(*turn).delTimers(h.owner, "", true)
							return err
						})
					})
					if err != nil {
						o.rt.log.Error("deleting a deleted facet's timers failed", "event", "facet_timers_failed",
							"namespace", o.ns.name, "path", h.owner, "error", err)
					}
				})
			}
		}})
	}
	for _, r := range alarm {
		if err := t.putTimer(r); err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		}
	}
	st.ForgetStmts() // they may name dropped tables
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Rows is the result of Query. It counts the rows read.
type Rows struct {
	rows *sql.Rows
	o    *object
}

// Next prepares the next row for Scan; it returns false at the end or on error (see Err).
func (r *Rows) Next() bool {
	if r.rows.Next() {
		r.o.reads.Add(1)
		return true
	}
	return false
}

// Scan copies the current row's columns into dest, as database/sql does.
func (r *Rows) Scan(dest ...any) error { return r.rows.Scan(dest...) }

// Err returns the error that ended iteration, if any.
func (r *Rows) Err() error { return r.rows.Err() }

// Close closes the rows. Rows still open when their segment ends are closed then.
func (r *Rows) Close() error { return r.rows.Close() }

// Row is the result of QueryRow and One.
type Row struct {
	rows  *Rows
	err   error
	query string
	one   bool // from One: exactly one row
}

// Scan copies the row's columns into dest. It returns ErrNoRows if there was no row, and, from One,
// ErrMultipleResults if there were more.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		if r.one {
			return fmt.Errorf("core: exactly one row expected: no results (in %q): %w", short(r.query), ErrNoRows)
		}
		return ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	if r.one {
		if r.rows.Next() {
			return fmt.Errorf("%w (in %q)", ErrMultipleResults, short(r.query))
		}
		if err := r.rows.Err(); err != nil {
			return err
		}
	}
	return r.rows.Close()
}
