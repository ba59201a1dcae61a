package core

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"
)

// failNext arms durable_test_fail_once, a SQL function for this file's tests: its first call
// after failNext is set fails.
var failNext atomic.Bool

func init() {
	sqlite.MustRegisterScalarFunction("durable_test_fail_once", 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		if failNext.Swap(false) {
			return nil, errors.New("an injected write failure")
		}
		return nil, nil
	})
}

type retryRoot struct{ st *State }

// retryFacet records each run of its alarm. It sets no next alarm: a run's new alarm would stand
// after a failure (A14), and the retry tested here is the one of the timer that ran.
type retryFacet struct {
	st     *State
	during func()
}

func (f *retryFacet) Alarm(ctx context.Context, info AlarmInfo) error {
	if _, err := f.st.Storage().Exec(ctx, "INSERT INTO runs(k) VALUES (?)", info.Scheduled.UnixNano()); err != nil {
		return err
	}
	f.during()
	return nil
}

// S-F6: a facet's alarm run commits in the facet, then the root's write that ends the run fails,
// and the write that records the retry succeeds. The retry keeps the run's token, so that the next
// delivery finds the facet's record of the run and does not run it again.
func TestFacetAlarm_RunCommittedBeforeTheRootsFailedWriteIsNotRunAgain(t *testing.T) {
	ctx := context.Background()
	now := time.Now() // the clock stands still: only TriggerAlarm delivers
	rt, err := Open(Options{Dir: t.TempDir(), Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	roots, err := Register(rt, "roots", func(_ context.Context, st *State) (*retryRoot, error) { return &retryRoot{st: st}, nil })
	if err != nil {
		t.Fatal(err)
	}
	r, err := roots.Get("r")
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	// During the first run (inside the root's Await), a turn of the root arms a failure of the
	// root's next write to its timers: the write that ends the run.
	during := func() {
		once.Do(func() {
			err := Do(ctx, r, func(ctx context.Context, _ *retryRoot) error {
				s, err := ctx.(*turn).write()
				if err != nil {
					return err
				}
				for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
					if err := s.ExecOwn("CREATE TEMP TRIGGER fail_" + op + " BEFORE " + op +
						" ON main._durable_timers BEGIN SELECT durable_test_fail_once(); END"); err != nil {
						return err
					}
				}
				failNext.Store(true)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	facets, err := RegisterFacet(rt, roots, "f", func(ctx context.Context, st *State) (*retryFacet, error) {
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS runs(k INTEGER NOT NULL)")
		return &retryFacet{st: st, during: during}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Call(ctx, r, func(_ context.Context, o *retryRoot) (*Stub[*retryFacet], error) { return facets.Get(o.st, "f") })
	if err != nil {
		t.Fatal(err)
	}
	first := now.Add(time.Minute)
	if err := Do(ctx, f, func(ctx context.Context, o *retryFacet) error { return o.st.SetAlarm(ctx, first) }); err != nil {
		t.Fatal(err)
	}
	// The run: it commits in the facet, the root's end of it fails, and its retry is recorded.
	if _, err := f.TriggerAlarm(ctx); err != nil {
		t.Fatal(err)
	}
	if failNext.Load() {
		t.Fatal("the root's write that ends the run did not fail: the test injected nothing")
	}
	// The retry's delivery.
	had, err := f.TriggerAlarm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !had {
		t.Fatal("no timer to retry: the failed end of the run left none")
	}
	var runs int
	var alarm time.Time
	var set bool
	if err := Do(ctx, f, func(ctx context.Context, o *retryFacet) error {
		if err := o.st.Storage().QueryRow(ctx, "SELECT count(*) FROM runs").Scan(&runs); err != nil {
			return err
		}
		alarm, set, err = o.st.GetAlarm(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Errorf("runs of the alarm: got %d, want 1 (the run committed before the root's write failed)", runs)
	}
	if set {
		t.Errorf("the facet's alarm: %v is set; want none (its one run is over)", alarm)
	}
}
