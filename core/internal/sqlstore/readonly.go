package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"modernc.org/sqlite"
)

// ErrWrite is wrapped by ReadOnly.Query's error for a statement that would change anything.
var ErrWrite = errors.New("statement would write")

// ReadOnly is a connection to a database that cannot change it, three times over: the file is
// opened read-only (mode=ro), the connection has query_only set, and an authorizer refuses every
// action but reading (SELECT, reading columns, functions, recursive CTEs and the pragmas that only
// read). It is for inspecting a database while its owner's connection is closed: an open one holds
// the file exclusively (see Open).
type ReadOnly struct {
	path   string
	db     *sql.DB
	conn   *sql.Conn
	denied string
}

// OpenReadOnly opens the database at path for reading; it never creates the file.
func OpenReadOnly(path string) (*ReadOnly, error) {
	r, err := openReadOnly(path, ownLockVFS)
	if errors.Is(err, errNoOwnLock) {
		r, err = openReadOnly(path, "")
	}
	return r, err
}

// openReadOnly is OpenReadOnly with vfs ("": SQLite's default; else ownLockVFS, and the connection
// takes a read lock on the file itself, in exclusive locking mode so that the log's index is in its
// own memory, as Open's).
func openReadOnly(path, vfs string) (*ReadOnly, error) {
	u := url.URL{Scheme: "file", Path: path}
	q := "?mode=ro&_pragma=query_only(1)&_pragma=busy_timeout(10000)"
	if vfs != "" {
		q = "?mode=ro&vfs=" + vfs + "&_pragma=locking_mode(EXCLUSIVE)&_pragma=query_only(1)"
	}
	db, err := sql.Open("sqlite", u.String()+q)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	r := &ReadOnly{path: path, db: db}
	if r.conn, err = db.Conn(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	err = r.conn.Raw(func(dc any) error {
		if vfs != "" {
			if _, _, err := lockOwn(dc, path, false, nil); err != nil {
				return err
			}
		}
		a, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return fmt.Errorf("sqlite driver has no authorizer")
		}
		return a.RegisterAuthorizer(r.authorize)
	})
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the connection, and removes the log's index (-shm) that a read-only connection
// shares through a file: the owner's connection keeps its own in memory, and no other connection is
// open on the file.
func (r *ReadOnly) Close() error {
	r.conn.Close()
	err := r.db.Close()
	if rerr := os.Remove(r.path + "-shm"); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = rerr
	}
	return err
}

// Query runs query with args and hands each row to scan. A statement the authorizer refuses fails
// with an error wrapping ErrWrite that says what was refused.
func (r *ReadOnly) Query(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	r.denied = ""
	rows, err := r.conn.QueryContext(ctx, query, args...)
	if err == nil {
		for err == nil && rows.Next() {
			err = scan(rows)
		}
		if err == nil {
			err = rows.Err()
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil && r.denied != "" {
		return fmt.Errorf("%w: %s", ErrWrite, r.denied)
	}
	return err
}

// authorize allows reading only.
func (r *ReadOnly) authorize(action sqlite.AuthorizerActionCode, arg1, arg2, _, _ string) sqlite.AuthorizerReturnCode {
	switch action {
	case sqlite.AuthSelect, sqlite.AuthRead, sqlite.AuthFunction, sqlite.AuthRecursive:
		return sqlite.AuthorizerOK
	case sqlite.AuthPragma:
		if p := strings.ToLower(arg1); inspectPragmas[p] || arg2 == "" && readPragmas[p] {
			return sqlite.AuthorizerOK
		}
		r.denied = fmt.Sprintf("PRAGMA %s may change the database", arg1)
	case sqlite.AuthInsert:
		r.denied = "INSERT into " + arg1
	case sqlite.AuthUpdate:
		r.denied = "UPDATE of " + arg1
	case sqlite.AuthDelete:
		r.denied = "DELETE from " + arg1
	case sqlite.AuthAttach, sqlite.AuthDetach:
		r.denied = "ATTACH and DETACH"
	case sqlite.AuthTransaction, sqlite.AuthSavepoint:
		r.denied = "transaction control"
	default:
		r.denied = "schema changes (CREATE, DROP, ALTER) and other writes"
	}
	return sqlite.AuthorizerDeny
}
