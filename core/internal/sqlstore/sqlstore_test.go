package sqlstore

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testSchema = "CREATE TABLE IF NOT EXISTS _own_meta(k TEXT PRIMARY KEY, v ANY) WITHOUT ROWID"

func openTest(t *testing.T, path, synchronous string) *DB {
	t.Helper()
	db, err := Open(path, synchronous, "_own_", func() ([]byte, error) { return BuildTemplate(filepath.Dir(path), testSchema) })
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func count(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.QueryOwn("SELECT count(*) FROM t", nil, func(r *sql.Rows) error { return r.Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeRows commits n rows of size bytes each, one transaction per row.
func writeRows(t *testing.T, db *DB, n, size int) {
	t.Helper()
	if err := db.ExecOwn("CREATE TABLE IF NOT EXISTS t(v BLOB)"); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := db.ExecOwn("INSERT INTO t(v) VALUES (?)", strings.Repeat("x", size)); err != nil {
			t.Fatal(err)
		}
	}
}

// S-R5: what an object committed survives its eviction (the database's close). With FULL the
// commits are durable in the log, so the close leaves the log as it is and the next open reads it
// back; with NORMAL the close checkpoints the log into the database and truncates it.
func TestCloseKeepsOrCheckpointsTheLog(t *testing.T) {
	for _, tc := range []struct {
		sync    string
		keepLog bool
	}{{"FULL", true}, {"NORMAL", false}} {
		t.Run(tc.sync, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "o.sqlite")
			db := openTest(t, path, tc.sync)
			if db.keepWAL != tc.keepLog {
				t.Fatalf("keepWAL = %v, want %v", db.keepWAL, tc.keepLog)
			}
			for pragma, want := range map[string]int{"cache_size": cachePages, "journal_size_limit": WALTrim} {
				var got int
				if err := db.QueryOwn("PRAGMA "+pragma, nil, func(r *sql.Rows) error { return r.Scan(&got) }); err != nil || got != want {
					t.Fatalf("PRAGMA %s = %d (%v), want %d", pragma, got, err, want)
				}
			}
			writeRows(t, db, 5, 100)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if got := walSize(t, path); (got > 0) != tc.keepLog {
				t.Fatalf("log is %d bytes after close; want it kept: %v", got, tc.keepLog)
			}
			db = openTest(t, path, tc.sync)
			defer db.Close()
			if got := count(t, db); got != 5 {
				t.Fatalf("%d rows after reopening, want 5", got)
			}
		})
	}
}

// S-R5: an object that wrote a lot over its life pays for it once: the close that finds the log
// past WALTrim checkpoints and truncates it, and the rows are all there at the next open.
func TestCloseTrimsALargeLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.sqlite")
	db := openTest(t, path, "FULL")
	rows := 2 * WALTrim / 4000
	writeRows(t, db, rows, 4000)
	if got := walSize(t, path); got <= WALTrim {
		t.Fatalf("log is %d bytes before close, want more than %d", got, WALTrim)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := walSize(t, path); got != 0 {
		t.Fatalf("log is %d bytes after close, want 0", got)
	}
	db = openTest(t, path, "FULL")
	defer db.Close()
	if got := count(t, db); got != rows {
		t.Fatalf("%d rows after reopening, want %d", got, rows)
	}
}
