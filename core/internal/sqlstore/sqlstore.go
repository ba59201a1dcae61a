// Package sqlstore is one SQLite database file used by one owner at a time: a single connection,
// caches of prepared statements (the owner's and its user's, kept apart), and an authorizer keeping
// transaction control, attached databases, settings and the owner's tables (named with a prefix)
// from user SQL. New databases start as a copy of a template. Quiesce gives back the memory of a
// database left idle (its page cache, statements and lookaside), and its next statement takes
// what it needs again; Park closes the connection of a database left idle longer but keeps its
// file's lock, and its next statement opens the connection again.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	"modernc.org/sqlite"
)

const maxCachedStmts = 256 // per cache of prepared statements

// WALTrim is the size of write-ahead log past which Close checkpoints the log into the database and
// truncates it before closing. Below it the log is kept as it is: the next Open reads it back (about
// 0.5 ms per MiB), which costs less than the checkpoint's two fsyncs.
const WALTrim = 128 << 10

// fileOps serializes opening and closing SQLite connections. Both take SQLite's process-wide locks
// (its list of open files, its page caches, the allocator) many times, across system calls; from
// many goroutines at once those locks convoy, and opens and closes slow down tenfold.
var fileOps sync.Mutex

// cachePages is each database's page cache, in pages: open databases are many and mostly small.
const cachePages = 64

// DB is an open database, used by one goroutine at a time.
type DB struct {
	path     string
	vfs      string   // the VFS the connection opens with ("": SQLite's default)
	sync     string   // the synchronous setting
	keepWAL  bool     // closing does not checkpoint: every commit already fsynced the log
	ownLock  bool     // the connection locks the file itself (see ownLockVFS), not SQLite
	temp     bool     // user SQL made a TEMP object, which lives as long as the connection: no Park
	parked   bool     // Park closed the connection (conn and db are nil); the next statement opens it again
	hold     *os.File // while parked: a duplicate of the database's descriptor, holding the file's lock
	db       *sql.DB
	conn     *sql.Conn
	prefix   string                 // names of the owner's tables
	stmts    map[string]*sql.Stmt   // user statements
	own      map[string]*sql.Stmt   // the owner's statements, kept apart so user SQL never reuses one
	control  map[string]driver.Stmt // the owner's transaction statements, prepared on the driver
	internal bool                   // the owner's own statement is running: authorize all
	denied   string                 // why the authorizer refused the last user statement
	query    string                 // the user statement being prepared
	quiet    bool                   // Quiesce or Park gave the memory back; the next statement takes it again
	noLook   bool                   // Quiesce turned the lookaside allocator off
	look     uintptr                // the lookaside buffer of lookasideBufs the connection uses (0: none, or SQLite's own)
	woke     func()                 // Quiesce's or Park's caller, told when the database is in use again
}

// BuildTemplate returns the bytes of an empty WAL-mode database holding schema. New databases start
// as a copy of it: one file write and two fsyncs instead of SQLite's journaled creation.
func BuildTemplate(dir, schema string) ([]byte, error) {
	path := filepath.Join(dir, "_template.sqlite")
	os.Remove(path)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String()+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	_, err = db.Exec(schema)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(path)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
	if err != nil {
		return nil, fmt.Errorf("database template: %w", err)
	}
	return b, nil
}

// createFromTemplate writes a new database file, durable before it takes its name, so the name
// never points at a partial file. The name becomes durable with the first commit (SQLite creates
// the WAL and fsyncs the directory); no write is acknowledged before, so losing it loses nothing.
func createFromTemplate(path string, template []byte) error {
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return err
	}
	tmp := path + ".new"
	err := WriteFileSync(tmp, template)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// WriteFileSync writes b to the file at path, replacing what it held, and syncs it.
func WriteFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ensureDir creates dir (a facets directory) if needed, durably: it syncs the parent directory.
func ensureDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open opens the database at path, creating it from template if it does not exist. Tables named
// with prefix belong to the owner: user SQL may not change them. The connection holds the file
// exclusively while it is open.
//
// The connection holds its file in SQLite's exclusive locking mode, set before it first reads the
// file: it keeps the write-ahead log's index in its own memory instead of a shared -shm file, so an
// open database holds two file descriptors (the database and its log), not three. It holds the
// file's lock from before its first read until it closes: on Linux a lock of its own on the
// database's descriptor, taken as it opens (see ownLockVFS: SQLite's unix VFS makes each open cost
// more the more files are open), elsewhere SQLite's exclusive lock, taken at its first read. No
// other connection, in this process or another, can read the file meanwhile (it fails with
// SQLITE_BUSY): whoever else reads it (inspection, a copy, a check) does so through this
// connection, or while it is closed. Open waits up to 10 s for another connection to let go of the
// file (ErrBusy).
// The log, its commits and their fsyncs are the same in either mode: a commit is acknowledged after
// the log holds it (fsynced with synchronous FULL), the index is rebuilt from the log at the next
// open, after a crash as after a close, and a crash releases the lock with the process.
//
// With synchronous FULL, closing the database does not checkpoint it: every commit fsynced the
// write-ahead log, so what it holds is durable where it is, and the next Open reads it back (a
// crash leaves the same state, and SQLite recovers it the same way). Close checkpoints and truncates
// a log larger than WALTrim, so the log stays small and so does the next Open's reading of it. With
// NORMAL, commits do not fsync the log: closing checkpoints it, with its fsyncs, as SQLite does.
func Open(path, synchronous, prefix string, template func() ([]byte, error)) (*DB, error) {
	return OpenChecked(path, synchronous, prefix, template, nil)
}

// OpenChecked is Open that runs check (if not nil) on the file before SQLite reads anything but the
// first bytes of its header: through the connection's own descriptor, under its lock (where the
// connection locks the file itself; elsewhere through a descriptor of its own, before the
// connection's first read). A file check finds damaged is closed as it was found, nothing written
// to it, and OpenChecked returns a *DamageError.
func OpenChecked(path, synchronous, prefix string, template func() ([]byte, error), check FileCheck) (*DB, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		t, err := template()
		if err != nil {
			return nil, err
		}
		if err := createFromTemplate(path, t); err != nil {
			return nil, err
		}
	}
	s, err := open(path, ownLockVFS, synchronous, prefix, check)
	if errors.Is(err, errNoOwnLock) {
		s, err = open(path, "", synchronous, prefix, check)
	}
	return s, err
}

// open is OpenChecked over an existing file, with vfs ("": SQLite's default, which locks the file;
// else ownLockVFS, and the connection locks it itself).
func open(path, vfs, synchronous, prefix string, check FileCheck) (*DB, error) {
	if check != nil && vfs == "" {
		if err := checkFile(path, check); err != nil {
			return nil, err
		}
	}
	s := &DB{path: path, vfs: vfs, sync: synchronous, prefix: prefix, stmts: make(map[string]*sql.Stmt),
		own: make(map[string]*sql.Stmt), control: make(map[string]driver.Stmt)}
	if err := s.connect(nil, check); err != nil {
		return nil, err
	}
	return s, nil
}

// connect opens the database's connection and applies its settings. hold, if not nil, is a
// parked database's descriptor holding the file's lock (see Park): the new connection takes the
// lock over from it, and connect closes it, whatever happens. If connect fails, the database has
// no connection. check, if not nil, runs as OpenChecked says (where the connection locks the file
// itself: open ran it already elsewhere).
func (s *DB) connect(hold *os.File, check FileCheck) error {
	// No journal_mode pragma: the template's header says WAL already, and WAL mode persists.
	u := url.URL{Scheme: "file", Path: s.path}
	if s.vfs != "" {
		u.RawQuery = "vfs=" + s.vfs
	}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		closeHold(hold)
		return err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	fileOps.Lock()
	conn, err := db.Conn(context.Background())
	fileOps.Unlock()
	if err != nil {
		closeHold(hold)
		db.Close()
		return err
	}
	s.db, s.conn = db, conn
	err = s.conn.Raw(func(dc any) error {
		r, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			closeHold(hold)
			return fmt.Errorf("sqlite driver has no authorizer")
		}
		if s.vfs != "" {
			f, size, err := lockOwn(dc, s.path, true, hold)
			if err != nil {
				return err
			}
			s.ownLock = true
			if check != nil {
				if why, err := check(f, size); err != nil {
					return err
				} else if why != "" {
					return &DamageError{Reason: why}
				}
			}
		} else {
			closeHold(hold)
		}
		if err := r.RegisterAuthorizer(s.authorize); err != nil {
			return err
		}
		s.keptLookaside(dc)
		// Keep the WAL file at close: re-creating it on activation costs a directory fsync.
		if fc, ok := dc.(sqlite.FileControl); ok {
			if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
				return err
			}
		}
		if s.sync == "FULL" {
			s.keepWAL = noCheckpointOnClose(dc)
		}
		return nil
	})
	if err == nil {
		// The settings run here, outside fileOps, not from the DSN inside the connection's open: the
		// first of them that needs the schema reads it, with the log and its index, and that work
		// (most of an open) needs no process-wide lock. busy_timeout comes first, for that read.
		// journal_size_limit: a checkpoint at close truncates the log to zero bytes, and a log that
		// restarts is cut back to WALTrim. locking_mode comes before anything reads the file.
		s.internal = true
		_, err = s.conn.ExecContext(context.Background(), settings(s.sync))
		s.internal = false
	}
	if err != nil {
		s.disconnect() // checkpoints nothing: the file may be another's to write
		return err
	}
	return nil
}

// settings returns the statement of an open's settings (see open), built once for each value of
// synchronous it is given.
func settings(synchronous string) string {
	if v, ok := settingsFor.Load(synchronous); ok {
		return v.(string)
	}
	q := fmt.Sprintf("PRAGMA locking_mode = EXCLUSIVE; PRAGMA busy_timeout = 10000; PRAGMA synchronous = %s; PRAGMA cache_size = %d; PRAGMA journal_size_limit = %d",
		synchronous, cachePages, WALTrim)
	settingsFor.Store(synchronous, q)
	return q
}

var settingsFor sync.Map // synchronous -> its settings statement

// Close closes the statements and the database. A write-ahead log that is not kept at close (see
// Open), or has grown past WALTrim, is checkpointed into the database and truncated first, before
// the connection closes under fileOps: its fsyncs do not hold up other opens and closes. Closing a
// parked database lets go of its file.
func (s *DB) Close() error {
	s.noLook = false // a quiesced database closes without taking its lookaside back
	s.awake()
	if s.parked {
		s.parked = false
		return closeHold(s.hold)
	}
	ckpt := s.trimLog()
	err := s.disconnect()
	s.stmts, s.own, s.control = nil, nil, nil
	if err == nil && ckpt != nil {
		err = fmt.Errorf("checkpoint at close: %w", ckpt)
	}
	return err
}

// trimLog checkpoints the write-ahead log into the database and truncates it before the
// connection closes, if the log is not kept at close (see Open) or has grown past WALTrim.
func (s *DB) trimLog() error {
	trim := !s.keepWAL
	if !trim {
		fi, err := os.Stat(s.path + "-wal")
		trim = err == nil && fi.Size() > WALTrim
	}
	if !trim {
		return nil
	}
	return s.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)")
}

// disconnect closes the statements and the connection, under fileOps; the database has no
// connection then.
func (s *DB) disconnect() error {
	s.ForgetStmts()
	s.closeOwn()
	s.lookasideBack()
	fileOps.Lock()
	err := s.conn.Close()
	cerr := s.db.Close()
	fileOps.Unlock()
	s.conn, s.db = nil, nil
	if err == nil {
		err = cerr
	}
	return err
}

// Stmt returns the prepared user statement for query, preparing it once.
func (s *DB) Stmt(query string) (*sql.Stmt, error) {
	s.query = query
	return s.prepare(s.stmts, query)
}

func (s *DB) prepare(cache map[string]*sql.Stmt, query string) (*sql.Stmt, error) {
	if s.quiet {
		if err := s.wake(); err != nil {
			return nil, err
		}
	}
	if st, ok := cache[query]; ok {
		return st, nil
	}
	st, err := s.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	if len(cache) >= maxCachedStmts {
		for q, old := range cache { // drop one at random
			old.Close()
			delete(cache, q)
			break
		}
	}
	cache[query] = st
	return st, nil
}

// Control runs one of the owner's transaction statements (BEGIN, SAVEPOINT, RELEASE, ROLLBACK,
// COMMIT: no arguments, no rows) on the driver's connection directly, prepared once: a turn runs
// two of them, so they skip database/sql's statement machinery.
func (s *DB) Control(query string) error {
	if s.quiet {
		if err := s.wake(); err != nil {
			return err
		}
	}
	s.internal = true
	defer func() { s.internal = false }()
	return s.conn.Raw(func(dc any) error {
		st, ok := s.control[query]
		if !ok {
			p, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("sqlite driver cannot prepare")
			}
			var err error
			if st, err = p.PrepareContext(context.Background(), query); err != nil {
				return err
			}
			s.control[query] = st
		}
		x, ok := st.(driver.StmtExecContext)
		if !ok {
			return fmt.Errorf("sqlite driver statement cannot execute")
		}
		_, err := x.ExecContext(context.Background(), nil)
		return err
	})
}

// ExecOwn runs one of the owner's own statements.
func (s *DB) ExecOwn(query string, args ...any) error {
	_, err := s.ExecOwnResult(query, args...)
	return err
}

// ExecOwnResult is ExecOwn with the statement's result.
func (s *DB) ExecOwnResult(query string, args ...any) (sql.Result, error) {
	s.internal = true
	defer func() { s.internal = false }()
	st, err := s.prepare(s.own, query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// ErrStop ends QueryOwn's scan early, without an error.
var ErrStop = errors.New("stop")

// QueryOwn runs one of the owner's own queries and hands each row to scan.
func (s *DB) QueryOwn(query string, args []any, scan func(*sql.Rows) error) error {
	return s.QueryOwnContext(context.Background(), query, args, scan)
}

// QueryOwnContext is QueryOwn for a long query: once ctx is done, SQLite interrupts it and it
// returns ctx's error.
func (s *DB) QueryOwnContext(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	s.internal = true
	defer func() { s.internal = false }()
	st, err := s.prepare(s.own, query)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err == ErrStop {
			return nil
		} else if err != nil {
			return err
		}
	}
	return rows.Err()
}

// ForgetStmts closes the cached user statements (after a schema change).
func (s *DB) ForgetStmts() {
	for q, stmt := range s.stmts {
		stmt.Close()
		delete(s.stmts, q)
	}
}

// closeOwn closes the owner's cached statements and its transaction statements.
func (s *DB) closeOwn() {
	for q, stmt := range s.own {
		stmt.Close()
		delete(s.own, q)
	}
	if len(s.control) > 0 {
		s.conn.Raw(func(any) error {
			for q, st := range s.control {
				st.Close()
				delete(s.control, q)
			}
			return nil
		})
	}
}
