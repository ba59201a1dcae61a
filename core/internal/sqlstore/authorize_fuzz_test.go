package sqlstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ownerSchema stands for the runtime's tables (prefix _durable_) and a table of the user's.
const ownerSchema = `CREATE TABLE main._durable_meta(k TEXT PRIMARY KEY, v ANY) WITHOUT ROWID;
CREATE TABLE main._durable_kv(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE main._durable_timers(owner TEXT NOT NULL, key TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(owner, key)) WITHOUT ROWID;
CREATE INDEX main._durable_timers_at ON _durable_timers(at);
CREATE TABLE main.lines(n INTEGER PRIMARY KEY, text TEXT)`

// ddlSeeds are statements that try to create, shadow, alter or hook the owner's objects, and some
// harmless ones.
var ddlSeeds = []string{
	"CREATE TEMP TABLE _durable_kv(key TEXT PRIMARY KEY, value BLOB)",
	"CREATE TEMPORARY TABLE \"_durable_kv\"(x)",
	"CREATE TABLE temp._durable_timers(x)",
	"CREATE TEMP TABLE IF NOT EXISTS _DURABLE_META(k, v)",
	"CREATE TEMP TRIGGER t AFTER INSERT ON main._durable_timers BEGIN DELETE FROM main._durable_timers; END",
	"CREATE TEMP TRIGGER t AFTER INSERT ON main._durable_kv BEGIN UPDATE main._durable_kv SET value = 'x'; END",
	"CREATE TRIGGER t BEFORE DELETE ON _durable_kv BEGIN SELECT 1; END",
	"CREATE TRIGGER t AFTER INSERT ON lines BEGIN INSERT INTO _durable_kv VALUES ('a', 'b'); END; INSERT INTO lines VALUES (1, 'x')",
	"CREATE TEMP TRIGGER t AFTER INSERT ON lines BEGIN DELETE FROM main._durable_kv; END; INSERT INTO lines VALUES (2, 'y')",
	"CREATE TEMP VIEW _durable_meta AS SELECT 1 AS k, 2 AS v",
	"CREATE VIEW _durable_v AS SELECT 1",
	"CREATE TEMP VIEW v AS SELECT * FROM main._durable_kv; CREATE TEMP TRIGGER t INSTEAD OF INSERT ON v BEGIN INSERT INTO main._durable_kv VALUES (new.key, new.value); END; INSERT INTO v VALUES ('k', 'v')",
	"CREATE INDEX _durable_i ON lines(text)",
	"CREATE INDEX i ON _durable_kv(value)",
	"DROP INDEX _durable_timers_at",
	"DROP TABLE _durable_kv",
	"ALTER TABLE _durable_kv RENAME TO kv",
	"ALTER TABLE _durable_kv ADD COLUMN x",
	"ALTER TABLE _durable_kv RENAME COLUMN value TO v",
	"ALTER TABLE lines RENAME TO _durable_lines",
	"CREATE VIRTUAL TABLE _durable_x USING fts5(a)",
	"CREATE TABLE _durable_new(x)",
	"INSERT INTO _durable_kv VALUES ('k', 'v')",
	"UPDATE _durable_kv SET value = 'x'",
	"DELETE FROM _durable_timers",
	"REPLACE INTO _durable_meta VALUES ('name', 'evil')",
	"PRAGMA writable_schema = 1",
	"ATTACH ':memory:' AS temp2",
	"CREATE TEMP TABLE scratch(x); INSERT INTO scratch VALUES (1)",
	"CREATE TABLE copy AS SELECT * FROM _durable_kv",
	"SELECT * FROM _durable_kv",
}

// FuzzAuthorizer runs a user statement and checks that the owner's objects are as they were: the
// same rows of main.sqlite_schema, no object of the owner's names or on its tables in the TEMP
// schema, no trigger on its tables, no new main object of its names, the same data. (S-O5)
func FuzzAuthorizer(f *testing.F) {
	for _, s := range ddlSeeds {
		f.Add(s)
	}
	template, err := BuildTemplate(f.TempDir(), ownerSchema)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stmt string) {
		db, err := Open(filepath.Join(t.TempDir(), "o.sqlite"), "OFF", "_durable_", func() ([]byte, error) { return template, nil })
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.ExecOwn("INSERT INTO main._durable_kv VALUES ('k', x'01'), ('j', x'02'); INSERT INTO main._durable_timers VALUES ('', '', 5)"); err != nil {
			t.Fatal(err)
		}
		before := ownerState(t, db)
		if st, err := db.Stmt(stmt); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st.ExecContext(ctx)
			cancel()
		}
		db.ForgetStmts()
		after := ownerState(t, db)
		if before != after {
			t.Fatalf("%q changed the owner's objects:\nbefore %s\nafter  %s", stmt, before, after)
		}
		// The owner's statements still reach its own tables.
		if err := db.ExecOwn("INSERT INTO main._durable_kv VALUES ('new', x'03')"); err != nil {
			t.Fatalf("after %q the owner's insert fails: %v", stmt, err)
		}
		var n int
		if err := db.QueryOwn("SELECT count(*) FROM main._durable_kv", nil, func(r *sql.Rows) error { return r.Scan(&n) }); err != nil || n != 3 {
			t.Fatalf("after %q the owner's table holds %d rows (%v), want 3", stmt, n, err)
		}
	})
}

// ownerState describes the owner's objects and data, and anything in any schema that uses its
// names or sits on its tables.
func ownerState(t *testing.T, db *DB) string {
	t.Helper()
	var b strings.Builder
	q := func(query string) {
		err := db.QueryOwn(query, nil, func(r *sql.Rows) error {
			var s sql.NullString
			if err := r.Scan(&s); err != nil {
				return err
			}
			b.WriteString(s.String + "\n")
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	owned := `(lower(name) LIKE '\_durable\_%' ESCAPE '\' OR lower(tbl_name) LIKE '\_durable\_%' ESCAPE '\')`
	q("SELECT type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '') FROM main.sqlite_schema WHERE " + owned + " ORDER BY name")
	q("SELECT 'temp ' || type || ' ' || name || ' on ' || tbl_name FROM temp.sqlite_schema WHERE " + owned + " ORDER BY name")
	q("SELECT 'trigger ' || name FROM main.sqlite_schema WHERE type = 'trigger' AND " + owned)
	q("SELECT group_concat(key || '=' || hex(value), ',') FROM (SELECT * FROM main._durable_kv ORDER BY key)")
	q("SELECT group_concat(owner || '/' || key || '@' || at, ',') FROM main._durable_timers")
	return b.String()
}
