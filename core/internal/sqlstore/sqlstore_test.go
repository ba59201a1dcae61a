package sqlstore

import (
	"bytes"
	"database/sql"
	"errors"
	"io"
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

// O10: Quiesce gives back the page cache, the prepared statements and the lookaside allocator of an
// idle database; the next statement takes the lookaside back and finds every row, and the caller is
// told once, whether by a statement or by Close.
func TestQuiesceGivesMemoryBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 40, 1000) // about ten pages
	if got := count(t, db); got != 40 {
		t.Fatalf("%d rows, want 40", got)
	}
	before, err := db.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if before.Cache < 10*4096 || before.Stmts == 0 || before.Lookaside == 0 {
		t.Fatalf("memory in use after writing and reading: %+v; want ten pages cached, statements and lookaside", before)
	}
	woke := 0
	if err := db.Quiesce(func() { woke++ }); err != nil {
		t.Fatal(err)
	}
	after, err := db.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if !db.Quiet() || after.Cache > 8<<10 || after.Stmts != 0 || after.Lookaside != 0 {
		t.Fatalf("quiesced (%v): %+v in use (before: %+v); want at most 8 KiB of cache, no statements, no lookaside",
			db.Quiet(), after, before)
	}
	if woke != 0 {
		t.Fatalf("told %d times before any statement, want 0", woke)
	}
	writeRows(t, db, 1, 10)
	if got := count(t, db); got != 41 {
		t.Fatalf("%d rows after quiescing, want 41", got)
	}
	again, err := db.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if db.Quiet() || woke != 1 || again.Lookaside == 0 {
		t.Fatalf("after two statements: quiet %v, told %d times, %+v in use; want awake, told once, lookaside in use",
			db.Quiet(), woke, again)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, "FULL")
	defer db.Close()
	if got := count(t, db); got != 41 {
		t.Fatalf("%d rows after reopening, want 41", got)
	}

	// A quiesced database whose log is small closes without running a statement: the caller is
	// told all the same.
	small := openTest(t, filepath.Join(t.TempDir(), "small.sqlite"), "FULL")
	writeRows(t, small, 1, 10)
	woke = 0
	if err := small.Quiesce(func() { woke++ }); err != nil {
		t.Fatal(err)
	}
	if err := small.Close(); err != nil {
		t.Fatal(err)
	}
	if woke != 1 {
		t.Fatalf("told %d times by Close of a quiesced database, want 1", woke)
	}
}

// An open database holds its file alone: its log's index lives in its own memory (no -shm file, two
// descriptors), another connection cannot read the file while it is open, and can once it is closed.
func TestOpenHoldsTheFileExclusively(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 3, 10)
	if _, err := os.Stat(path + "-shm"); !os.IsNotExist(err) {
		t.Fatalf("stat %s-shm: %v, want no such file while the database is open", path, err)
	}
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var n int
	if err := other.QueryRow("SELECT count(*) FROM t").Scan(&n); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("another connection read the open file: %d rows, error %v; want SQLITE_BUSY", n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Query(t.Context(), "SELECT count(*) FROM t", nil, func(rows *sql.Rows) error { return rows.Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("read %d rows after the close, want 3", n)
	}
	if _, err := os.Stat(path + "-shm"); !os.IsNotExist(err) {
		t.Fatalf("stat %s-shm: %v, want it removed with the read-only connection", path, err)
	}
}

// OpenChecked hands its check the file as it is on disk (its size, its header), and a file the check
// finds damaged is refused with a *DamageError and left as it was found: neither the database nor
// its log (which holds committed frames) is changed.
func TestOpenCheckedRefusesADamagedFileUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 20, 100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	dbBytes, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	walBytes, err := os.ReadFile(path + "-wal")
	if err != nil || len(walBytes) == 0 {
		t.Fatalf("the log: %d bytes, %v; want the committed frames", len(walBytes), err)
	}

	var gotSize int64
	var gotHeader [100]byte
	_, err = OpenChecked(path, "FULL", "_own_", nil, func(f io.ReaderAt, size int64) (string, error) {
		gotSize = size
		_, err := f.ReadAt(gotHeader[:], 0)
		return "found damaged", err
	})
	var de *DamageError
	if !errors.As(err, &de) || de.Reason != "found damaged" {
		t.Fatalf("OpenChecked of a file its check refuses: %v; want a *DamageError", err)
	}
	if gotSize != int64(len(dbBytes)) || !bytes.Equal(gotHeader[:], dbBytes[:100]) {
		t.Fatalf("the check saw %d bytes and header %q; want %d and %q", gotSize, gotHeader[:16], len(dbBytes), dbBytes[:16])
	}
	for _, f := range []struct {
		suffix string
		want   []byte
	}{{"", dbBytes}, {"-wal", walBytes}} {
		got, err := os.ReadFile(path + f.suffix)
		if err != nil || !bytes.Equal(got, f.want) {
			t.Fatalf("%s%s after the refused open: %d bytes (%v), changed; want the %d bytes found", path, f.suffix, len(got), err, len(f.want))
		}
	}

	db, err = OpenChecked(path, "FULL", "_own_", nil, func(io.ReaderAt, int64) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := count(t, db); n != 20 {
		t.Fatalf("%d rows after a passed check; want 20", n)
	}
}

// An open database's lookaside is in a kept buffer, and a database that takes its lookaside back
// after Quiesce takes a buffer another database gave back, not a new allocation; Close gives the
// buffer back too; the lookaside works in it (slots in use after a statement).
func TestQuiesceKeepsLookasideBuffers(t *testing.T) {
	dir := t.TempDir()
	a, b := openTest(t, filepath.Join(dir, "a.sqlite"), "FULL"), openTest(t, filepath.Join(dir, "b.sqlite"), "FULL")
	bufA := a.look
	if bufA == 0 || b.look == 0 {
		t.Fatalf("opened databases use lookaside buffers %#x and %#x, want kept ones (not 0)", a.look, b.look)
	}
	quiesce := func(db *DB) {
		t.Helper()
		if err := db.Quiesce(nil); err != nil {
			t.Fatal(err)
		}
	}
	wake := func(db *DB) uintptr {
		t.Helper()
		writeRows(t, db, 1, 10)
		m, err := db.Memory()
		if err != nil {
			t.Fatal(err)
		}
		if m.Lookaside == 0 {
			t.Fatalf("no lookaside slot in use after a statement: %+v", m)
		}
		return db.look
	}
	quiesce(b)
	quiesce(a) // gives bufA back
	if got := wake(b); got != bufA {
		t.Fatalf("the next database woken took buffer %#x, want %#x, the one given back", got, bufA)
	}
	if err := b.Close(); err != nil { // gives bufA back
		t.Fatal(err)
	}
	if got := wake(a); got != bufA {
		t.Fatalf("after Close, the next database woken took buffer %#x, want %#x, the one given back", got, bufA)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
