package sqlstore

import (
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// readerEnv makes the test binary a process that reads the table t of the database it names, with
// SQLite's default VFS and no busy timeout, and prints the count or the error.
const readerEnv = "SQLSTORE_TEST_READ"

func TestMain(m *testing.M) {
	if path := os.Getenv(readerEnv); path != "" {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		var n int
		if err == nil {
			err = db.QueryRow("SELECT count(*) FROM t").Scan(&n)
			db.Close()
		}
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error())
			os.Exit(1)
		}
		os.Stdout.WriteString("rows: " + string(rune('0'+n)))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// readInAnotherProcess reads path's table t from another process.
func readInAnotherProcess(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), readerEnv+"="+path)
	out, _ := cmd.Output()
	return string(out)
}

// S-O10: an open database refuses the file to another process, and lets it read once closed.
func TestOpenRefusesTheFileToAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 3, 10)
	if out := readInAnotherProcess(t, path); !strings.Contains(out, "locked") {
		t.Fatalf("another process read the open file: %q; want SQLITE_BUSY", out)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if out := readInAnotherProcess(t, path); out != "rows: 3" {
		t.Fatalf("another process after the close: %q, want rows: 3", out)
	}
}

// S-O10: on Linux the connection locks its file itself (ownLockVFS): SQLite's unix VFS, whose opens walk
// a list of every open file, is not used.
func TestOpenLocksTheFileItself(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the connection locks the file itself on Linux only")
	}
	db := openTest(t, filepath.Join(t.TempDir(), "x.sqlite"), "FULL")
	defer db.Close()
	if !db.ownLock {
		t.Fatal("the connection left the file to SQLite's locks")
	}
}

// S-O10: Open waits for another connection that holds the file (here a read-only one, as a check's), as
// SQLite's busy timeout would: it gets the file once the other lets go, and gives up with ErrBusy
// after busyTimeout. Giving up does not take the file from the other connection.
func TestOpenWaitsForTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 3, 10)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		r, err := OpenReadOnly(path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		start := time.Now()
		_, err = Open(path, "FULL", "_own_", nil)
		if !errors.Is(err, ErrBusy) || time.Since(start) < busyTimeout {
			t.Errorf("Open of a held file: %v after %v, want ErrBusy after %v", err, time.Since(start), busyTimeout)
		}
		done := make(chan error, 1)
		go func() {
			db, err := Open(path, "FULL", "_own_", nil)
			if err == nil {
				err = db.Close()
			}
			done <- err
		}()
		time.Sleep(busyTimeout / 2)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Open returned while the file was held: %v", err)
		default:
		}
		var n int
		if err := r.Query(t.Context(), "SELECT count(*) FROM t", nil, func(rows *sql.Rows) error { return rows.Scan(&n) }); err != nil || n != 3 {
			t.Errorf("the read-only connection read %d rows (%v), want 3", n, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Open after the other connection let go: %v", err)
		}
	})
}

// S-O10: a database file written outside SQLite under LockFile (a catch-up from the log) is not
// read by the runtime's other connections meanwhile: a background check's read-only open waits for
// it, then reads the file once it is let go.
func TestLockFile_HoldsTheFileFromReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sqlite")
	db := openTest(t, path, "FULL")
	writeRows(t, db, 3, 10)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := LockFile(f); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if r, err := OpenReadOnly(path); !errors.Is(err, ErrBusy) {
			if err == nil {
				r.Close()
			}
			t.Fatalf("OpenReadOnly of a file being written: %v after %v, want ErrBusy", err, time.Since(start))
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := OpenReadOnly(path)
		if err != nil {
			t.Fatalf("OpenReadOnly once the file is let go: %v", err)
		}
		r.Close()
	})
}
