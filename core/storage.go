package core

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Storage is an object's own SQLite database, bound to its current turn.
//
// Every call runs inside the turn's savepoint: the turn's writes commit
// together (with other turns' in one group commit) or not at all. Storage
// calls never open the input gate, so a read followed by a write with no
// Await between them cannot be interleaved with another turn.
//
// Statements are prepared once per query text and cached, so pass values as
// ? arguments rather than formatting them into the text. Storage methods
// fail with ErrNotInTurn outside a turn.
type Storage struct {
	o *object
}

// Result describes the effect of Exec.
type Result struct {
	RowsAffected int64 // rows changed by the last INSERT, UPDATE or DELETE
	LastInsertID int64 // rowid of the last row inserted
}

// StorageStats are an object's billing units: rows read (returned to the
// object's code) and rows written (changed by its statements, KV writes and
// SetAlarm), counted over the object's life in this process.
type StorageStats struct {
	RowsRead    int64
	RowsWritten int64
}

// Stats returns the object's counters. It may be called at any time.
func (s *Storage) Stats() StorageStats {
	return StorageStats{RowsRead: s.o.reads.Load(), RowsWritten: s.o.writes.Load()}
}

// in returns the open database with the turn's savepoint in place, if
// ctx marks the object's running turn.
func (s *Storage) in(ctx context.Context) (*store, error) {
	if err := s.o.inTurn(ctx); err != nil {
		return nil, err
	}
	return s.begin()
}

// begin returns the open database with the turn's savepoint in place,
// opening the database and the group-commit batch as needed.
func (s *Storage) begin() (*store, error) {
	o := s.o
	if o.cur == nil {
		return nil, ErrNotInTurn
	}
	if o.store == nil {
		o.ns.waitClosed(o.id)
		st, err := openStore(o.dbPath(), o.rt.opts.Synchronous, o.rt.template)
		if err != nil {
			return nil, fmt.Errorf("core: open database: %w", err)
		}
		o.store = st
		o.hasStore.Store(true)
		o.rt.stats.openDBs.Add(1)
		o.rt.shed()
	}
	st := o.store
	if o.batch == nil {
		if err := st.execInternal("BEGIN"); err != nil {
			return nil, o.poison(err)
		}
		o.batch = &batch{done: make(chan struct{})}
		o.spOpen, o.spIsTx = true, true
		if st.fresh {
			err := st.execInternal(runtimeSchema)
			if err == nil {
				err = st.execInternal(`INSERT OR IGNORE INTO _durable_meta(k, v) VALUES ('namespace', ?), ('name', ?)`, o.ns.name, o.name)
			}
			if err != nil {
				return nil, o.poison(err)
			}
			st.fresh = false
			o.batch.dirty, o.batch.initMeta = true, true
		}
	}
	if !o.spOpen {
		if err := st.execInternal("SAVEPOINT turn"); err != nil {
			return nil, o.poison(err)
		}
		o.spOpen = true
	}
	return st, nil
}

// sqlErr gives a failed user statement a clear error.
func (s *Storage) sqlErr(st *store, query string, err error) error {
	if st.denied != "" {
		why := st.denied
		st.denied = ""
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

// Exec runs statements that return no rows. query may hold several
// statements separated by semicolons (a schema, say).
func (s *Storage) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	st, err := s.in(ctx)
	if err != nil {
		return Result{}, err
	}
	s.o.batch.dirty = true
	stmt, err := st.stmt(query)
	if err != nil {
		return Result{}, s.sqlErr(st, query, err)
	}
	res, err := stmt.Exec(args...)
	if err != nil {
		return Result{}, s.sqlErr(st, query, err)
	}
	var r Result
	switch firstKeyword(query) {
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH":
		r.RowsAffected, _ = res.RowsAffected()
		r.LastInsertID, _ = res.LastInsertId()
		s.o.writes.Add(r.RowsAffected)
	}
	return r, nil
}

// Query runs a statement that returns rows. Close the rows before the turn
// ends (the runtime closes any left open).
func (s *Storage) Query(ctx context.Context, query string, args ...any) (*Rows, error) {
	st, err := s.in(ctx)
	if err != nil {
		return nil, err
	}
	switch firstKeyword(query) {
	case "SELECT", "VALUES", "EXPLAIN", "PRAGMA":
	default:
		s.o.batch.dirty = true // INSERT ... RETURNING and the like
	}
	stmt, err := st.stmt(query)
	if err != nil {
		return nil, s.sqlErr(st, query, err)
	}
	rows, err := stmt.Query(args...)
	if err != nil {
		return nil, s.sqlErr(st, query, err)
	}
	return &Rows{rows: rows, o: s.o}, nil
}

// QueryRow runs a statement expected to return at most one row. Errors are
// deferred to Row.Scan.
func (s *Storage) QueryRow(ctx context.Context, query string, args ...any) *Row {
	rows, err := s.Query(ctx, query, args...)
	return &Row{rows: rows, err: err}
}

// Transaction runs fn as a nested transaction inside the turn: its writes
// are kept if fn returns nil and rolled back if it returns an error (which
// Transaction returns) or panics (which Transaction re-panics). Transactions
// nest.
func (s *Storage) Transaction(ctx context.Context, fn func() error) (err error) {
	st, err := s.in(ctx)
	if err != nil {
		return err
	}
	o := s.o
	o.txDepth++
	name := fmt.Sprintf("tx%d", o.txDepth)
	if err := st.execInternal("SAVEPOINT " + name); err != nil {
		o.txDepth--
		return o.poison(err)
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		// A panic or an error: undo fn's writes, keep the turn going.
		o.txDepth--
		if rerr := st.execInternal("ROLLBACK TO " + name); rerr == nil {
			_ = st.execInternal("RELEASE " + name)
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	ok = true
	o.txDepth--
	if err := st.execInternal("RELEASE " + name); err != nil {
		return o.poison(err)
	}
	return nil
}

// DeleteAll deletes everything the object stored: every table, view,
// index and trigger, the KV pairs, and the pending alarm (see
// DeleteAllKeepAlarm). It is part of the turn, so it rolls back with it.
func (s *Storage) DeleteAll(ctx context.Context) error { return s.deleteAll(ctx, false) }

// DeleteAllKeepAlarm is DeleteAll that leaves the pending alarm in place,
// as the original runtime did before 2026-02-24.
func (s *Storage) DeleteAllKeepAlarm(ctx context.Context) error { return s.deleteAll(ctx, true) }

func (s *Storage) deleteAll(ctx context.Context, keepAlarm bool) error {
	st, err := s.in(ctx)
	if err != nil {
		return err
	}
	s.o.batch.dirty = true
	rows, err := st.conn.QueryContext(s.o.rt.background(),
		`SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' AND name <> '_durable_meta' AND type IN ('table', 'view') ORDER BY type = 'table'`)
	if err != nil {
		return fmt.Errorf("core: delete all: %w", err)
	}
	var drops []string
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			rows.Close()
			return fmt.Errorf("core: delete all: %w", err)
		}
		drops = append(drops, fmt.Sprintf("DROP %s IF EXISTS %s", strings.ToUpper(typ), quoteIdent(name)))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("core: delete all: %w", err)
	}
	var alarm []timerRow
	if keepAlarm {
		if r, ok, err := s.o.getTimer("", ""); err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		} else if ok {
			alarm = append(alarm, r)
		}
	}
	drops = append(drops, runtimeSchema)
	for _, q := range drops {
		st.internal = true
		_, err := st.conn.ExecContext(s.o.rt.background(), q)
		st.internal = false
		if err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		}
	}
	s.o.segTimers = true
	if err := s.o.deleteFacets(); err != nil {
		return err
	}
	if fi := s.o.facet; fi != nil && !keepAlarm {
		// The facet's timers (and its facets') live in its root.
		if err := s.o.rootDo(func(root *object) error {
			st, err := root.state.Storage().begin()
			if err != nil {
				return err
			}
			root.batch.dirty, root.segTimers = true, true
			return st.execInternal("DELETE FROM _durable_timers WHERE owner = ? OR substr(owner, 1, ?) = ?", fi.owner, len(fi.owner)+1, fi.owner+"/")
		}); err != nil {
			return fmt.Errorf("core: delete all: facet timers: %w", err)
		}
	}
	for _, r := range alarm {
		if err := s.o.putTimer(r); err != nil {
			return fmt.Errorf("core: delete all: %w", err)
		}
	}
	for q, stmt := range st.stmts { // statements may name dropped tables
		stmt.Close()
		delete(st.stmts, q)
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Rows is the result of Query. It counts the rows read.
type Rows struct {
	rows *sql.Rows
	o    *object
}

// Next prepares the next row for Scan; it returns false at the end or on
// error (see Err).
func (r *Rows) Next() bool {
	if r.rows.Next() {
		r.o.reads.Add(1)
		return true
	}
	return false
}

// Scan copies the current row's columns into dest, as database/sql does.
func (r *Rows) Scan(dest ...any) error { return r.rows.Scan(dest...) }

// Columns returns the column names.
func (r *Rows) Columns() ([]string, error) { return r.rows.Columns() }

// Err returns the error that ended iteration, if any.
func (r *Rows) Err() error { return r.rows.Err() }

// Close closes the rows.
func (r *Rows) Close() error { return r.rows.Close() }

// Row is the result of QueryRow.
type Row struct {
	rows *Rows
	err  error
}

// Scan copies the row's columns into dest. It returns ErrNoRows if there
// was no row.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// Err returns the error of the query, if it failed before any row.
func (r *Row) Err() error { return r.err }

var _ = errors.New
