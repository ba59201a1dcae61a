package walship

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// openWAL opens a WAL-mode database at path on one connection, with a small page cache so that
// large transactions spill frames into the log before they commit.
func openWAL(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=cache_size(10)&_pragma=wal_autocheckpoint(50)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func dump(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out strings.Builder
	rows, err := db.Query("SELECT id, v FROM t ORDER BY id")
	if err != nil {
		t.Fatalf("read the replica: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var v []byte
		rows.Scan(&id, &v)
		out.WriteString(string(rune('a'+id%26)) + string(v[:4]))
	}
	var check string
	if err := db.QueryRow("PRAGMA quick_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("replica quick check: %q %v", check, err)
	}
	return out.String()
}

// S-CL1: a replica that applies what the cursor returns after each commit holds what the source holds:
// across small and large commits, a rolled-back transaction that spilled frames, checkpoints and
// restarts of the log (new salts), and a shrinking database.
func TestCursorFollowsCommits(t *testing.T) {
	dir := t.TempDir()
	src, replica := filepath.Join(dir, "src.db"), filepath.Join(dir, "replica.db")
	db := openWAL(t, src)
	if _, err := db.Exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)"); err != nil {
		t.Fatal(err)
	}
	// The file as SQLite made it before the cursor started: the replica starts as its image.
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	img, err := Image(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(replica, img); err != nil {
		t.Fatal(err)
	}
	c, err := NewCursor(src + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ship := func(what string) {
		t.Helper()
		cm, err := c.Next()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if cm == nil {
			t.Fatalf("%s: no commit found", what)
		}
		if err := Apply(replica, cm); err != nil {
			t.Fatal(err)
		}
		if got, want := dump(t, replica), dumpDB(t, db); got != want {
			t.Fatalf("%s: replica differs from the source", what)
		}
	}
	val := func(i int) []byte { return bytes.Repeat([]byte{byte('A' + i%26)}, 3000) }
	for i := range 30 {
		if _, err := db.Exec("INSERT INTO t(id, v) VALUES (?, ?)", i, val(i)); err != nil {
			t.Fatal(err)
		}
		ship("insert")
	}
	// A transaction larger than the page cache spills frames, then rolls back: none of it ships.
	tx, _ := db.Begin()
	for i := 100; i < 200; i++ {
		tx.Exec("INSERT INTO t(id, v) VALUES (?, ?)", i, val(i))
	}
	tx.Rollback()
	if cm, err := c.Next(); err != nil || cm != nil {
		t.Fatalf("after a rollback: %v, %v; want nothing", cm, err)
	}
	if _, err := db.Exec("UPDATE t SET v = ? WHERE id = 3", val(7)); err != nil {
		t.Fatal(err)
	}
	ship("update after the rollback")
	// A large committed transaction, then a restart of the log.
	tx, _ = db.Begin()
	for i := 200; i < 300; i++ {
		tx.Exec("INSERT INTO t(id, v) VALUES (?, ?)", i, val(i))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ship("large commit")
	for i, mode := range []string{"RESTART", "TRUNCATE", "PASSIVE"} {
		if _, err := db.Exec("PRAGMA wal_checkpoint(" + mode + ")"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO t(id, v) VALUES (?, ?)", 400+i, val(1)); err != nil {
			t.Fatal(err)
		}
		ship("after a checkpoint " + mode)
	}
	if _, err := db.Exec("DELETE FROM t WHERE id >= 100"); err != nil {
		t.Fatal(err)
	}
	ship("delete")
	if _, err := db.Exec("VACUUM"); err != nil {
		t.Fatal(err)
	}
	ship("vacuum (the database shrinks)")
	st, _ := os.Stat(replica)
	if cm, _ := Image(src); st.Size() == 0 || cm == nil {
		t.Fatal("no image")
	}
}

func dumpDB(t *testing.T, db *sql.DB) string {
	t.Helper()
	var out strings.Builder
	rows, err := db.Query("SELECT id, v FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var v []byte
		rows.Scan(&id, &v)
		out.WriteString(string(rune('a'+id%26)) + string(v[:4]))
	}
	return out.String()
}

// Bytes that are not a log or a database are refused with an error, not applied.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "x-wal")
	os.WriteFile(wal, bytes.Repeat([]byte{7}, 64), 0o644)
	if _, err := NewCursor(wal); err == nil {
		t.Fatal("a file that is not a log was read")
	}
	if _, err := ImageOf([]byte("not a database")); err == nil {
		t.Fatal("bytes that are not a database were read")
	}
	if err := Apply(filepath.Join(dir, "y"), &Commit{PageSize: 4096, DBPages: 1, Pages: []Page{{No: 1, Data: []byte("short")}}}); err == nil {
		t.Fatal("a short page was written")
	}
}

// A cursor placed before its log exists finds the log once SQLite makes it, and a read between two
// commits returns nothing.
func TestCursorBeforeTheLog(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.db")
	c, err := NewCursor(src + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if cm, err := c.Next(); err != nil || cm != nil {
		t.Fatalf("without a log: %v, %v; want nothing", cm, err)
	}
	db := openWAL(t, src)
	if _, err := db.Exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)"); err != nil {
		t.Fatal(err)
	}
	cm, err := c.Next()
	if err != nil || cm == nil || len(cm.Pages) == 0 {
		t.Fatalf("after the first commit: %v, %v; want its pages", cm, err)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if cm, err := c.Next(); err != nil || cm != nil {
		t.Fatalf("after a read: %v, %v; want nothing", cm, err)
	}
	if _, err := db.Exec("INSERT INTO t(id, v) VALUES (1, x'01')"); err != nil {
		t.Fatal(err)
	}
	if cm, err := c.Next(); err != nil || cm == nil {
		t.Fatalf("after an insert: %v, %v; want its pages", cm, err)
	}
}
