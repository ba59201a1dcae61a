package runindex

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"time"
)

// Index is the database. Writes are group-committed: a durable write waits for a shared commit.
type Index struct {
	db      *sql.DB
	conn    *sql.Conn
	pending chan struct{} // signalled when a lazy change waits to be written (Pending)

	mu       sync.Mutex // protects cur and flushing
	cur      *ixBatch   // ops waiting for the next commit
	flushing bool       // a leader is committing

	connMu sync.Mutex // serializes use of conn and stmts
	stmts  map[ixKind]*sql.Stmt
}

var ixQueries = map[ixKind]string{
	ixUpsert: "INSERT INTO alarms(ns, id, name, at) VALUES (?, ?, ?, ?) ON CONFLICT(ns, id) DO UPDATE SET at = excluded.at",
	ixDelete: "DELETE FROM alarms WHERE ns = ? AND id = ?",
	// One dead letter per (object, timer, first due time): a timer dropped again after a crash
	// updates its letter instead of adding a second.
	ixDead: "INSERT INTO dead_letters(ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(ns, id, path, key, scheduled) DO UPDATE SET " +
		"attempts = excluded.attempts, last_error = excluded.last_error, dropped = excluded.dropped RETURNING seq",
	ixUndead: "DELETE FROM dead_letters WHERE seq = ?",
	ixCatalog: "INSERT INTO objects(ns, id, name, file, created, active, size) VALUES (?, ?, ?, ?, ?, ?, ?) " +
		"ON CONFLICT(ns, id) DO UPDATE SET active = max(active, excluded.active), size = excluded.size",
	ixTouch:       "UPDATE objects SET active = max(active, ?), size = ? WHERE ns = ? AND id = ?",
	ixForget:      "DELETE FROM objects WHERE ns = ? AND id = ?",
	ixForgetUnder: "DELETE FROM objects WHERE substr(file, 1, ?) = ?",
}

type ixKind int

const (
	ixNone ixKind = iota
	ixUpsert
	ixDelete
	ixDead
	ixUndead
	ixCatalog
	ixTouch
	ixForget
	ixForgetUnder
)

type ixOp struct {
	kind         ixKind
	ns, id, name string
	at           int64
	dl           *Letter
	seq          int64
	obj          *Object
}

// Object is an entry of the catalog: an object (or facet) with a database.
type Object struct {
	Namespace, ID, Name string
	File                string // the database file, relative to the data directory
	Created, Active     int64  // unix ns
	Size                int64  // bytes of the database and its WAL when last closed
}

// Alarm is an entry of the alarm index.
type Alarm struct {
	Namespace, ID, Name string
	At                  int64
}

// Letter is a dead letter: a timer given up after its last retry.
type Letter struct {
	Seq                                        int64
	Namespace, Name, ObjectID, Path, Key, Kind string
	Payload                                    []byte
	Scheduled                                  time.Time
	Attempts                                   int
	LastError                                  string
	Dropped                                    time.Time
}

type ixBatch struct {
	ops  []ixOp
	done chan struct{}
	err  error
}

// schema is the index's tables. The dead letters' unique key came later: duplicates written before
// it are folded into the oldest first.
const schema = `
CREATE TABLE IF NOT EXISTS alarms(ns TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(ns, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters(seq INTEGER PRIMARY KEY AUTOINCREMENT, ns TEXT NOT NULL, name TEXT NOT NULL,
  id TEXT NOT NULL, path TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, payload BLOB,
  scheduled INTEGER NOT NULL, attempts INTEGER NOT NULL, last_error TEXT NOT NULL, dropped INTEGER NOT NULL);
DELETE FROM dead_letters WHERE seq NOT IN (SELECT min(seq) FROM dead_letters GROUP BY ns, id, path, key, scheduled);
CREATE UNIQUE INDEX IF NOT EXISTS dead_letters_key ON dead_letters(ns, id, path, key, scheduled);
CREATE TABLE IF NOT EXISTS objects(ns TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, file TEXT NOT NULL,
  created INTEGER NOT NULL, active INTEGER NOT NULL, size INTEGER NOT NULL, PRIMARY KEY(ns, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_name ON objects(ns, name)`

// Open opens (or creates) the index at path. newCatalog reports that the catalog table did not
// exist (a new file, or one written by an earlier version): the caller fills it.
func Open(path string) (ix *Index, newCatalog bool, err error) {
	u := url.URL{Scheme: "file", Path: path}
	db, err := sql.Open("sqlite", u.String()+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, false, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	ctx := context.Background()
	var check string
	if err == nil {
		err = conn.QueryRowContext(ctx, "PRAGMA main.quick_check(1)").Scan(&check)
		if err == nil && check != "ok" {
			err = fmt.Errorf("quick check: %s", check)
		}
	}
	var n int
	if err == nil {
		err = conn.QueryRowContext(ctx, "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = 'objects'").Scan(&n)
	}
	if err == nil {
		_, err = conn.ExecContext(ctx, schema)
	}
	ix = &Index{db: db, conn: conn, stmts: make(map[ixKind]*sql.Stmt), pending: make(chan struct{}, 1)}
	for k, q := range ixQueries {
		if err != nil {
			break
		}
		ix.stmts[k], err = conn.PrepareContext(ctx, q)
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		db.Close()
		return nil, false, fmt.Errorf("open runtime index: %w", err)
	}
	return ix, n == 0, nil
}

// Close writes what is pending and closes the index.
func (ix *Index) Close() error {
	err := ix.Flush()
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	for _, st := range ix.stmts {
		st.Close()
	}
	if cerr := ix.conn.Close(); err == nil {
		err = cerr
	}
	if cerr := ix.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Load hands every indexed alarm to fn.
func (ix *Index) Load(fn func(ns, id, name string, at int64)) error {
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	rows, err := ix.conn.QueryContext(context.Background(), "SELECT ns, id, name, at FROM alarms")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ns, id, name string
		var at int64
		if err := rows.Scan(&ns, &id, &name, &at); err != nil {
			return err
		}
		fn(ns, id, name, at)
	}
	return rows.Err()
}

// Upsert sets the object's time in the index to at; with wait, it returns once that is durable.
func (ix *Index) Upsert(ns, id, name string, at int64, wait bool) error {
	return ix.do(ixOp{kind: ixUpsert, ns: ns, id: id, name: name, at: at}, wait)
}

// Delete forgets the object's alarm, with the next commit.
func (ix *Index) Delete(ns, id string) { ix.do(ixOp{kind: ixDelete, ns: ns, id: id}, false) }

// Flush makes every change made so far durable.
func (ix *Index) Flush() error { return ix.do(ixOp{}, true) }

// Pending is signalled when a change waits for the next commit.
func (ix *Index) Pending() <-chan struct{} { return ix.pending }

// RemoveLetter removes dead letter seq, durably.
func (ix *Index) RemoveLetter(seq int64) error { return ix.do(ixOp{kind: ixUndead, seq: seq}, true) }

// do queues op (ixNone: just flush). With wait it returns once op is durable, else at once.
func (ix *Index) do(op ixOp, wait bool) error {
	ix.mu.Lock()
	if ix.cur == nil {
		ix.cur = &ixBatch{done: make(chan struct{})}
	}
	b := ix.cur
	if op.kind != ixNone {
		b.ops = append(b.ops, op)
	}
	if !wait {
		ix.mu.Unlock()
		select { // wake the flusher
		case ix.pending <- struct{}{}:
		default:
		}
		return nil
	}
	if ix.flushing { // the leader will commit our batch after its own
		ix.mu.Unlock()
		<-b.done
		return b.err
	}
	ix.flushing = true
	for ix.cur != nil {
		cb := ix.cur
		ix.cur = nil
		ix.mu.Unlock()
		cb.err = ix.write(cb.ops)
		close(cb.done)
		ix.mu.Lock()
	}
	ix.flushing = false
	ix.mu.Unlock()
	return b.err
}

func (ix *Index) write(ops []ixOp) (err error) {
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	ctx := context.Background()
	tx, err := ix.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runtime index: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	for i := range ops {
		op := &ops[i]
		st := tx.StmtContext(ctx, ix.stmts[op.kind])
		switch op.kind {
		case ixUpsert:
			_, err = st.ExecContext(ctx, op.ns, op.id, op.name, op.at)
		case ixDelete:
			_, err = st.ExecContext(ctx, op.ns, op.id)
		case ixDead:
			dl := op.dl
			err = st.QueryRowContext(ctx, dl.Namespace, dl.Name, dl.ObjectID, dl.Path, dl.Key, dl.Kind, dl.Payload,
				dl.Scheduled.UnixNano(), dl.Attempts, dl.LastError, dl.Dropped.UnixNano()).Scan(&dl.Seq)
		case ixUndead:
			_, err = st.ExecContext(ctx, op.seq)
		case ixCatalog:
			c := op.obj
			_, err = st.ExecContext(ctx, c.Namespace, c.ID, c.Name, c.File, c.Created, c.Active, c.Size)
		case ixTouch:
			c := op.obj
			_, err = st.ExecContext(ctx, c.Active, c.Size, c.Namespace, c.ID)
		case ixForget:
			_, err = st.ExecContext(ctx, op.ns, op.id)
		case ixForgetUnder:
			_, err = st.ExecContext(ctx, len(op.name), op.name)
		}
		if err != nil {
			return fmt.Errorf("runtime index: %w", err)
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("runtime index: %w", err)
	}
	return nil
}

// AddLetter writes dl durably and returns its sequence number.
func (ix *Index) AddLetter(dl Letter) (int64, error) {
	d := dl
	if err := ix.do(ixOp{kind: ixDead, dl: &d}, true); err != nil {
		return 0, err
	}
	return d.Seq, nil
}

// Letters lists the dead letters, oldest first.
func (ix *Index) Letters() ([]Letter, error) {
	if err := ix.Flush(); err != nil { // see our own writes
		return nil, err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	rows, err := ix.conn.QueryContext(context.Background(),
		"SELECT seq, ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped FROM dead_letters ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	defer rows.Close()
	var out []Letter
	for rows.Next() {
		var dl Letter
		var sched, dropped int64
		if err := rows.Scan(&dl.Seq, &dl.Namespace, &dl.Name, &dl.ObjectID, &dl.Path, &dl.Key, &dl.Kind, &dl.Payload, &sched, &dl.Attempts, &dl.LastError, &dropped); err != nil {
			return nil, fmt.Errorf("dead letters: %w", err)
		}
		dl.Scheduled, dl.Dropped = time.Unix(0, sched), time.Unix(0, dropped)
		out = append(out, dl)
	}
	return out, rows.Err()
}

// Catalog adds an object to the catalog (or updates its activity and size); with wait, it returns
// once that is durable.
func (ix *Index) Catalog(o Object, wait bool) error {
	return ix.do(ixOp{kind: ixCatalog, obj: &o}, wait)
}

// Touch records an object's last activity and size, with the next commit.
func (ix *Index) Touch(ns, id string, active, size int64) {
	ix.do(ixOp{kind: ixTouch, obj: &Object{Namespace: ns, ID: id, Active: active, Size: size}}, false)
}

// Forget removes an object from the catalog and the alarm index, durably.
func (ix *Index) Forget(ns, id string) error {
	ix.do(ixOp{kind: ixDelete, ns: ns, id: id}, false)
	return ix.do(ixOp{kind: ixForget, ns: ns, id: id}, true)
}

// ForgetUnder removes from the catalog, durably, every object whose file is below the directory dir
// (relative to the data directory, ending in a separator).
func (ix *Index) ForgetUnder(dir string) error {
	return ix.do(ixOp{kind: ixForgetUnder, name: dir}, true)
}

// Lookup returns the catalog's entry for an object, and whether there is one.
func (ix *Index) Lookup(ns, id string) (Object, bool, error) {
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	o := Object{Namespace: ns, ID: id}
	err := ix.conn.QueryRowContext(context.Background(), "SELECT name, file, created, active, size FROM objects WHERE ns = ? AND id = ?", ns, id).
		Scan(&o.Name, &o.File, &o.Created, &o.Active, &o.Size)
	if err == sql.ErrNoRows {
		return Object{}, false, nil
	}
	if err != nil {
		return Object{}, false, fmt.Errorf("catalog: %w", err)
	}
	return o, true, nil
}

// List returns up to limit catalog entries of namespace ns with a name after after, in name order.
// With ns "" it lists every namespace, in (namespace, name) order, after is then ignored.
func (ix *Index) List(ns, after string, limit int) ([]Object, error) {
	if err := ix.Flush(); err != nil {
		return nil, err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	q, args := "SELECT ns, id, name, file, created, active, size FROM objects WHERE ns = ? AND name > ? ORDER BY name LIMIT ?", []any{ns, after, limit}
	if ns == "" {
		q, args = "SELECT ns, id, name, file, created, active, size FROM objects ORDER BY ns, name", nil
	}
	rows, err := ix.conn.QueryContext(context.Background(), q, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer rows.Close()
	var out []Object
	for rows.Next() {
		var o Object
		if err := rows.Scan(&o.Namespace, &o.ID, &o.Name, &o.File, &o.Created, &o.Active, &o.Size); err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// Fill writes, in one transaction, catalog entries, alarms (each only if the index has none for
// its object, or a later one) and dead letters: what a rebuild found in the objects' databases.
func (ix *Index) Fill(objects []Object, alarms []Alarm, letters []Letter) error {
	if err := ix.Flush(); err != nil {
		return err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	ctx := context.Background()
	tx, err := ix.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runtime index: %w", err)
	}
	defer tx.Rollback()
	for _, o := range objects {
		if _, err := tx.ExecContext(ctx, ixQueries[ixCatalog], o.Namespace, o.ID, o.Name, o.File, o.Created, o.Active, o.Size); err != nil {
			return fmt.Errorf("runtime index: %w", err)
		}
	}
	for _, a := range alarms {
		if _, err := tx.ExecContext(ctx, "INSERT INTO alarms(ns, id, name, at) VALUES (?, ?, ?, ?) ON CONFLICT(ns, id) DO UPDATE SET at = min(at, excluded.at)",
			a.Namespace, a.ID, a.Name, a.At); err != nil {
			return fmt.Errorf("runtime index: %w", err)
		}
	}
	for _, dl := range letters {
		var seq int64
		if err := tx.QueryRowContext(ctx, ixQueries[ixDead], dl.Namespace, dl.Name, dl.ObjectID, dl.Path, dl.Key, dl.Kind, dl.Payload,
			dl.Scheduled.UnixNano(), dl.Attempts, dl.LastError, dl.Dropped.UnixNano()).Scan(&seq); err != nil {
			return fmt.Errorf("runtime index: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runtime index: %w", err)
	}
	return nil
}

// CopyTo writes a consistent copy of the index to path (VACUUM INTO), with everything written so
// far.
func (ix *Index) CopyTo(path string) error {
	if err := ix.Flush(); err != nil {
		return err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	if _, err := ix.conn.ExecContext(context.Background(), "VACUUM INTO ?", path); err != nil {
		return fmt.Errorf("copy runtime index: %w", err)
	}
	return nil
}

// Reset makes the catalog and the alarm index hold exactly objects and alarms (used on a backup's
// copy); the dead letters stay.
func (ix *Index) Reset(objects []Object, alarms []Alarm) error {
	if err := ix.Flush(); err != nil {
		return err
	}
	ix.connMu.Lock()
	_, err := ix.conn.ExecContext(context.Background(), "DELETE FROM alarms; DELETE FROM objects")
	ix.connMu.Unlock()
	if err != nil {
		return fmt.Errorf("runtime index: %w", err)
	}
	return ix.Fill(objects, alarms, nil)
}
