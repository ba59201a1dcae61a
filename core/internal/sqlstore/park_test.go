package sqlstore

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// openFDs is the number of file descriptors the process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// S-O11: a parked database holds one descriptor and its file's lock (no other process can read
// it), no connection; its next statement opens the connection again and sees every commit; Close
// lets go of the file.
func TestParkKeepsTheFileAndReopens(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a database parks where its connection locks the file itself: Linux")
	}
	path := filepath.Join(t.TempDir(), "x.sqlite")
	fd0 := openFDs(t)
	db := openTest(t, path, "FULL")
	writeRows(t, db, 3, 10)
	if got := openFDs(t) - fd0; got != 2 {
		t.Fatalf("an open database holds %d descriptors, want 2", got)
	}
	woke := 0
	if err := db.Quiesce(func() { woke += 10 }); err != nil {
		t.Fatal(err)
	}
	parked, err := db.Park(func() { woke++ })
	if err != nil || !parked || !db.Parked() || !db.Quiet() {
		t.Fatalf("Park: %v, %v (parked %v, quiet %v), want parked", parked, err, db.Parked(), db.Quiet())
	}
	if woke != 10 {
		t.Fatalf("Quiesce's caller told %d times as the database parked, want once", woke/10)
	}
	if out := readInAnotherProcess(t, path); !strings.Contains(out, "locked") {
		t.Fatalf("another process read the parked file: %q; want SQLITE_BUSY", out)
	}
	if got := openFDs(t) - fd0; got != 1 {
		t.Fatalf("a parked database holds %d descriptors, want 1", got)
	}
	if again, err := db.Park(nil); err != nil || !again {
		t.Fatalf("Park of a parked database: %v, %v; want parked, no error", again, err)
	}
	writeRows(t, db, 1, 10)
	if got := count(t, db); got != 4 {
		t.Fatalf("%d rows after parking, want 4", got)
	}
	if db.Parked() || db.Quiet() || woke != 11 {
		t.Fatalf("after a statement: parked %v, quiet %v, Park's caller told %d times; want awake, told once",
			db.Parked(), db.Quiet(), woke-10)
	}
	if got := openFDs(t) - fd0; got != 2 {
		t.Fatalf("a reopened database holds %d descriptors, want 2", got)
	}
	if out := readInAnotherProcess(t, path); !strings.Contains(out, "locked") {
		t.Fatalf("another process read the reopened file: %q; want SQLITE_BUSY", out)
	}

	// Parked, then closed: the caller is told, the file is let go, and the rows are there.
	if parked, err := db.Park(func() { woke++ }); err != nil || !parked {
		t.Fatalf("Park: %v, %v", parked, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if woke != 12 {
		t.Fatalf("Park's caller told %d times by Close, want once", woke-11)
	}
	if got := openFDs(t) - fd0; got != 0 {
		t.Fatalf("a closed database holds %d descriptors, want 0", got)
	}
	if out := readInAnotherProcess(t, path); out != "rows: 4" {
		t.Fatalf("another process after the close: %q, want rows: 4", out)
	}
}

// S-O11: parking closes the connection as Close does: with NORMAL, whose commits do not fsync the
// log, the log is checkpointed into the database first.
func TestParkCheckpointsLikeClose(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a database parks where its connection locks the file itself: Linux")
	}
	path := filepath.Join(t.TempDir(), "x.sqlite")
	db := openTest(t, path, "NORMAL")
	defer db.Close()
	writeRows(t, db, 5, 100)
	if walSize(t, path) == 0 {
		t.Fatal("no log before parking")
	}
	if parked, err := db.Park(nil); err != nil || !parked {
		t.Fatalf("Park: %v, %v", parked, err)
	}
	if got := walSize(t, path); got != 0 {
		t.Fatalf("log is %d bytes after parking with NORMAL, want it checkpointed and truncated", got)
	}
	if got := count(t, db); got != 5 {
		t.Fatalf("%d rows after parking, want 5", got)
	}
}

// S-O11: a database whose user SQL made a TEMP object (which lives as long as the connection) is
// not parked, and the object stays.
func TestParkKeepsTempObjects(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a database parks where its connection locks the file itself: Linux")
	}
	for _, stmt := range []string{
		"CREATE TEMP TABLE scratch(v)",
		"CREATE TABLE temp.scratch(v)",
		"CREATE TEMP VIEW scratch AS SELECT 1 AS v",
	} {
		t.Run(stmt, func(t *testing.T) {
			db := openTest(t, filepath.Join(t.TempDir(), "x.sqlite"), "FULL")
			defer db.Close()
			st, err := db.Stmt(stmt)
			if err == nil {
				_, err = st.Exec()
			}
			if err != nil {
				t.Fatal(err)
			}
			if parked, err := db.Park(nil); err != nil || parked {
				t.Fatalf("Park after %s: %v, %v; want not parked", stmt, parked, err)
			}
			st, err = db.Stmt("SELECT count(*) FROM temp.scratch")
			if err != nil {
				t.Fatalf("the TEMP object is gone: %v", err)
			}
			var n int
			if err := st.QueryRow().Scan(&n); err != nil {
				t.Fatal(err)
			}
		})
	}
}
