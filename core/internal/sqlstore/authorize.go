package sqlstore

import (
	"fmt"
	"strings"

	"modernc.org/sqlite"
)

// Pragmas user SQL may use: the first set only reads whatever its argument names; the second may
// only be read (with an argument they would set).
var (
	inspectPragmas = map[string]bool{"table_info": true, "table_xinfo": true, "table_list": true,
		"index_list": true, "index_info": true, "index_xinfo": true, "foreign_key_list": true,
		"foreign_key_check": true, "integrity_check": true, "quick_check": true}
	readPragmas = map[string]bool{"page_count": true, "page_size": true, "freelist_count": true,
		"user_version": true, "schema_version": true, "data_version": true, "compile_options": true,
		"function_list": true, "pragma_list": true, "collation_list": true}
)

// Denied returns why the authorizer refused the last user statement, or "", and forgets it.
func (s *DB) Denied() string {
	why := s.denied
	s.denied = ""
	return why
}

// authorize is SQLite's authorizer for user statements: it refuses transaction control, attached
// databases, pragmas that change settings, writes to the owner's tables, and any object (table,
// view, index, trigger; TEMP or not) named with the owner's prefix or on one of its tables, keeping
// the reason. The owner's own statements name their tables main.<name>.
func (s *DB) authorize(action sqlite.AuthorizerActionCode, arg1, arg2, schema, _ string) sqlite.AuthorizerReturnCode {
	if s.internal {
		return sqlite.AuthorizerOK
	}
	if madeTemp(action, schema) {
		s.temp = true // even if refused below or the statement fails: Park only needs to be safe
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
	case sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete:
		if s.owned(arg1) {
			return deny(fmt.Sprintf("table %s belongs to the runtime", arg1))
		}
	case sqlite.AuthCreateTable, sqlite.AuthDropTable, sqlite.AuthCreateTempTable, sqlite.AuthDropTempTable,
		sqlite.AuthCreateView, sqlite.AuthDropView, sqlite.AuthCreateTempView, sqlite.AuthDropTempView,
		sqlite.AuthCreateIndex, sqlite.AuthDropIndex, sqlite.AuthCreateTempIndex, sqlite.AuthDropTempIndex,
		sqlite.AuthCreateTrigger, sqlite.AuthDropTrigger, sqlite.AuthCreateTempTrigger, sqlite.AuthDropTempTrigger,
		sqlite.AuthCreateVTable, sqlite.AuthDropVTable, sqlite.AuthAlterTable:
		// arg1 names the object made or dropped (for ALTER TABLE, the schema), arg2 the table it is
		// on (for a virtual table, its module). The owner's names are reserved in every schema,
		// TEMP included (a TEMP object would shadow the owner's in unqualified names), and no
		// trigger may sit on the owner's tables.
		for _, name := range []string{arg1, arg2} {
			if s.owned(name) {
				return deny(fmt.Sprintf("the name %s belongs to the runtime (in main and TEMP alike; no trigger, view or index on it)", name))
			}
		}
		// ALTER TABLE ... RENAME TO does not show the new name: a statement naming the owner's
		// prefix anywhere may not alter a table.
		if action == sqlite.AuthAlterTable && strings.Contains(strings.ToLower(s.query), s.prefix) {
			return deny(fmt.Sprintf("ALTER TABLE may not give a table a name of the runtime's (%s*)", s.prefix))
		}
	}
	return sqlite.AuthorizerOK
}

// madeTemp reports whether an authorizer action makes an object in the TEMP schema, which lives
// only as long as the connection.
func madeTemp(action sqlite.AuthorizerActionCode, schema string) bool {
	switch action {
	case sqlite.AuthCreateTempTable, sqlite.AuthCreateTempView, sqlite.AuthCreateTempIndex, sqlite.AuthCreateTempTrigger:
		return true
	case sqlite.AuthCreateTable, sqlite.AuthCreateView, sqlite.AuthCreateIndex, sqlite.AuthCreateTrigger, sqlite.AuthCreateVTable:
		return strings.EqualFold(schema, "temp")
	}
	return false
}

func (s *DB) owned(name string) bool {
	return strings.HasPrefix(strings.ToLower(name), s.prefix)
}

// FirstKeyword returns the first SQL keyword of query, upper-cased, after white space and comments.
func FirstKeyword(query string) string {
	q := strings.TrimLeft(query, " \t\r\n;")
	for strings.HasPrefix(q, "--") || strings.HasPrefix(q, "/*") {
		end := "\n"
		if q[0] == '/' {
			end = "*/"
		}
		i := strings.Index(q, end)
		if i < 0 {
			return ""
		}
		q = strings.TrimLeft(q[i+len(end):], " \t\r\n;")
	}
	end := strings.IndexFunc(q, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_')
	})
	if end < 0 {
		end = len(q)
	}
	return strings.ToUpper(q[:end])
}
