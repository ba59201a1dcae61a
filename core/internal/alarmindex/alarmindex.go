// Package alarmindex is the runtime's own database: when each object's earliest timer is due (so
// due alarms are found without opening every object), and the dead letters (timers given up after
// their last retry). It knows objects only as (namespace, id, name).
package alarmindex

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
	ixDead: "INSERT INTO dead_letters(ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
	ixUndead: "DELETE FROM dead_letters WHERE seq = ?",
}

type ixKind int

const (
	ixNone ixKind = iota
	ixUpsert
	ixDelete
	ixDead
	ixUndead
)

type ixOp struct {
	kind         ixKind
	ns, id, name string
	at           int64
	dl           *Letter
	seq          int64
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

// Open opens (or creates) the index at path.
func Open(path string) (*Index, error) {
	u := url.URL{Scheme: "file", Path: path}
	db, err := sql.Open("sqlite", u.String()+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	if err == nil {
		_, err = conn.ExecContext(context.Background(), `
CREATE TABLE IF NOT EXISTS alarms(ns TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(ns, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters(seq INTEGER PRIMARY KEY AUTOINCREMENT, ns TEXT NOT NULL, name TEXT NOT NULL,
  id TEXT NOT NULL, path TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, payload BLOB,
  scheduled INTEGER NOT NULL, attempts INTEGER NOT NULL, last_error TEXT NOT NULL, dropped INTEGER NOT NULL)`)
	}
	ix := &Index{db: db, conn: conn, stmts: make(map[ixKind]*sql.Stmt), pending: make(chan struct{}, 1)}
	for k, q := range ixQueries {
		if err != nil {
			break
		}
		ix.stmts[k], err = conn.PrepareContext(context.Background(), q)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open runtime index: %w", err)
	}
	return ix, nil
}

// Close closes the index.
func (ix *Index) Close() error {
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	for _, st := range ix.stmts {
		st.Close()
	}
	err := ix.conn.Close()
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
