package core

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"modernc.org/sqlite"
)

// maxCachedStmts bounds each database's prepared-statement cache.
const maxCachedStmts = 256

// store is an object's open database: one SQLite connection, its prepared
// statements, and the authorizer that keeps transaction control with the
// runtime. It is used only by the gate holder.
type store struct {
	db       *sql.DB
	conn     *sql.Conn
	stmts    map[string]*sql.Stmt // user statements
	own      map[string]*sql.Stmt // the runtime's statements, kept apart so user SQL never reuses one
	internal bool                 // the runtime's own statement is running: authorize all
	denied   string               // why the authorizer refused the last user statement
	fresh    bool                 // the runtime's tables do not exist yet
}

// openStore opens (creating if needed) the database at path.
func openStore(path, synchronous string) (*store, error) {
	u := url.URL{Scheme: "file", Path: path}
	dsn := u.String() + "?_pragma=journal_mode(WAL)&_pragma=synchronous(" + synchronous + ")&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	s := &store{db: db, stmts: make(map[string]*sql.Stmt), own: make(map[string]*sql.Stmt)}
	ctx := context.Background()
	if s.conn, err = db.Conn(ctx); err != nil {
		db.Close()
		return nil, err
	}
	err = s.conn.Raw(func(dc any) error {
		r, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return fmt.Errorf("core: sqlite driver has no authorizer")
		}
		return r.RegisterAuthorizer(s.authorize)
	})
	if err == nil {
		var n int
		err = s.conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '_durable_meta'").Scan(&n)
		s.fresh = n == 0
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *store) close() error {
	for _, st := range s.stmts {
		st.Close()
	}
	for _, st := range s.own {
		st.Close()
	}
	s.stmts, s.own = nil, nil
	err := s.conn.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// stmt returns the prepared user statement for query, preparing it once.
func (s *store) stmt(query string) (*sql.Stmt, error) {
	return s.prepare(s.stmts, query)
}

// ownStmt returns the prepared runtime statement for query.
func (s *store) ownStmt(query string) (*sql.Stmt, error) {
	return s.prepare(s.own, query)
}

func (s *store) prepare(cache map[string]*sql.Stmt, query string) (*sql.Stmt, error) {
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

// execInternal runs one of the runtime's own statements.
func (s *store) execInternal(query string, args ...any) error {
	_, err := s.execInternalResult(query, args...)
	return err
}

func (s *store) execInternalResult(query string, args ...any) (sql.Result, error) {
	s.internal = true
	defer func() { s.internal = false }()
	st, err := s.ownStmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// Pragmas user SQL may use: the first set only reads whatever its argument
// names; the second may only be read (with an argument they would set).
var (
	inspectPragmas = map[string]bool{
		"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
		"index_info": true, "index_xinfo": true, "foreign_key_list": true,
		"foreign_key_check": true, "integrity_check": true, "quick_check": true,
	}
	readPragmas = map[string]bool{
		"page_count": true, "page_size": true, "freelist_count": true,
		"user_version": true, "schema_version": true, "data_version": true,
		"compile_options": true, "function_list": true, "pragma_list": true,
		"collation_list": true,
	}
)

// authorize is SQLite's authorizer for user statements: transaction control,
// attached databases, pragmas that change settings and writes to the
// runtime's tables are refused, with the reason kept for the error.
func (s *store) authorize(action sqlite.AuthorizerActionCode, arg1, arg2, _, _ string) sqlite.AuthorizerReturnCode {
	if s.internal {
		return sqlite.AuthorizerOK
	}
	deny := func(why string) sqlite.AuthorizerReturnCode {
		s.denied = why
		return sqlite.AuthorizerDeny
	}
	switch action {
	case sqlite.AuthTransaction, sqlite.AuthSavepoint:
		return deny("transactions belong to the runtime: each turn is atomic; use Storage.Transaction for a nested one")
	case sqlite.AuthAttach, sqlite.AuthDetach:
		return deny("ATTACH and DETACH are not available: an object owns one database")
	case sqlite.AuthPragma:
		if p := strings.ToLower(arg1); inspectPragmas[p] || arg2 == "" && readPragmas[p] {
			return sqlite.AuthorizerOK
		}
		return deny(fmt.Sprintf("PRAGMA %s is not available: the runtime owns the database's settings", arg1))
	case sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete, sqlite.AuthCreateTable, sqlite.AuthDropTable:
		if isRuntimeTable(arg1) {
			return deny(fmt.Sprintf("table %s belongs to the runtime", arg1))
		}
	case sqlite.AuthAlterTable, sqlite.AuthCreateIndex, sqlite.AuthDropIndex, sqlite.AuthCreateTrigger, sqlite.AuthDropTrigger:
		if isRuntimeTable(arg2) {
			return deny(fmt.Sprintf("table %s belongs to the runtime", arg2))
		}
	}
	return sqlite.AuthorizerOK
}

func isRuntimeTable(name string) bool {
	return strings.HasPrefix(strings.ToLower(name), "_durable_")
}

// firstKeyword returns the first SQL keyword of query, upper-cased, after
// white space and comments.
func firstKeyword(query string) string {
	q := query
	for {
		q = strings.TrimLeft(q, " \t\r\n;")
		switch {
		case strings.HasPrefix(q, "--"):
			i := strings.IndexByte(q, '\n')
			if i < 0 {
				return ""
			}
			q = q[i+1:]
			continue
		case strings.HasPrefix(q, "/*"):
			i := strings.Index(q, "*/")
			if i < 0 {
				return ""
			}
			q = q[i+2:]
			continue
		}
		break
	}
	end := strings.IndexFunc(q, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_')
	})
	if end < 0 {
		end = len(q)
	}
	return strings.ToUpper(q[:end])
}
