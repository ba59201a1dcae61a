package core

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// rows is an object holding a table of rows, for the background check's tests.
type rows struct{ st *State }

func newRows(ctx context.Context, st *State) (*rows, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS r(v TEXT NOT NULL)")
	return &rows{st: st}, err
}

// filledRows opens a runtime over dir whose objects "o" and "p" hold 200 rows of 1 KiB each,
// closes it, and opens it again: the first call to each is its file's first open in that runtime,
// which queues the file's background check.
func filledRows(t *testing.T, dir string) (*Runtime, *Namespace[*rows]) {
	t.Helper()
	open := func() (*Runtime, *Namespace[*rows]) {
		rt, err := Open(Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := Register(rt, "rows", newRows)
		if err != nil {
			t.Fatal(err)
		}
		return rt, ns
	}
	rt, ns := open()
	row := strings.Repeat("r", 1024)
	for _, name := range []string{"o", "p"} {
		if err := callRows(ns, name, func(ctx context.Context, r *rows) error {
			for range 200 {
				if _, err := r.st.Storage().Exec(ctx, "INSERT INTO r(v) VALUES (?)", row); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	return open()
}

func callRows(ns *Namespace[*rows], name string, fn func(context.Context, *rows) error) error {
	s, err := ns.Get(name)
	if err != nil {
		return err
	}
	return Do(context.Background(), s, fn)
}

func nopRows(context.Context, *rows) error { return nil }

// checkCounts returns how many quick checks began and how many read their file to a verdict.
func checkCounts(rt *Runtime) (begun, ended int) {
	rt.checks.mu.Lock()
	defer rt.checks.mu.Unlock()
	return rt.checks.begun, rt.checks.ended
}

// S-O3: the quick check of a file's first open runs in the background, checkDelay after it, and
// never on Close: a runtime closed before a file's check is due closes without reading the file
// (its next runtime checks it), whether no check has run yet or one has and the next waits for its
// turn.
func TestDamage_CloseDoesNotRunTheCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, ns := filledRows(t, t.TempDir())
		if err := callRows(ns, "o", nopRows); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Close waited %v: for the check's timer", waited)
		}
		if begun, _ := checkCounts(rt); begun != 0 {
			t.Fatalf("Close began %d quick checks; want none", begun)
		}

		// o's check is due at 100 ms, p's at 150 ms; Close comes at 120 ms, after o's check.
		rt, ns = filledRows(t, t.TempDir())
		if err := callRows(ns, "o", nopRows); err != nil {
			t.Fatal(err)
		}
		time.Sleep(checkDelay / 2)
		if err := callRows(ns, "p", nopRows); err != nil {
			t.Fatal(err)
		}
		time.Sleep(checkDelay * 7 / 10)
		if begun, ended := checkCounts(rt); begun != 1 || ended != 1 {
			t.Fatalf("after o's check was due: %d checks begun, %d ended; want 1, 1", begun, ended)
		}
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		if begun, ended := checkCounts(rt); begun != 1 || ended != 1 {
			t.Fatalf("after Close: %d checks begun, %d ended; want 1, 1 (p's not begun)", begun, ended)
		}
	})
}

// S-O3: a check whose context is done (the runtime's, at Shutdown) does not read its file to a
// verdict: SQLite stops it, and no damage is recorded.
func TestDamage_CheckStopsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	rt, ns := filledRows(t, dir)
	defer rt.Close()
	if err := callRows(ns, "o", nopRows); err != nil {
		t.Fatal(err)
	}
	o := ns.ns.live("o")
	if o == nil {
		t.Fatal("the object is not resident after its call")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rt.fullCheck(ctx, o)
	if begun, ended := checkCounts(rt); begun != 1 || ended != 0 {
		t.Fatalf("a check with its context done: %d begun, %d ended; want 1, 0", begun, ended)
	}
	if _, bad := rt.damaged.Load(o.place.db); bad {
		t.Fatal("a stopped check recorded damage")
	}
	if err := callRows(ns, "o", nopRows); err != nil {
		t.Fatalf("the object after a stopped check: %v", err)
	}
}
