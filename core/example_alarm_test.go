package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/core"
)

// Debouncer counts hits and flushes them in one batch, at most once per
// window: the alarm is armed only when none is pending (SEMANTICS A4).
type Debouncer struct {
	st      *core.State
	flushed []int // what each flush sent (a stand-in for a downstream store)
}

func NewDebouncer(ctx context.Context, st *core.State) (*Debouncer, error) {
	err := st.Storage().Migrate(ctx, core.SQL("CREATE TABLE pending(n INTEGER NOT NULL)"))
	return &Debouncer{st: st}, err
}

func (d *Debouncer) Hit(ctx context.Context) error {
	if _, err := d.st.Storage().Exec(ctx, "INSERT INTO pending(n) VALUES (1)"); err != nil {
		return err
	}
	if _, pending, err := d.st.GetAlarm(ctx); err != nil || pending {
		return err // an alarm is already coming: do not push it back
	}
	return d.st.SetAlarm(ctx, d.st.Now().Add(2*time.Second))
}

func (d *Debouncer) Alarm(ctx context.Context, info core.AlarmInfo) error {
	var n int
	if err := d.st.Storage().QueryRow(ctx, "SELECT count(*) FROM pending").Scan(&n); err != nil {
		return err
	}
	d.flushed = append(d.flushed, n)
	_, err := d.st.Storage().Exec(ctx, "DELETE FROM pending")
	return err
}

func ExampleState_SetAlarm() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "debouncers", NewDebouncer)
	stub, _ := ns.Get("link-1")
	ctx := context.Background()
	for range 5 {
		core.Do(ctx, stub, func(ctx context.Context, d *Debouncer) error { return d.Hit(ctx) })
	}
	stub.TriggerAlarm(ctx) // in a test; in production the alarm fires 2 s after the first hit
	flushed, _ := core.Call(ctx, stub, func(ctx context.Context, d *Debouncer) ([]int, error) {
		_, pending, err := d.st.GetAlarm(ctx)
		fmt.Println("alarm pending after the flush:", pending)
		return d.flushed, err
	})
	fmt.Println("flushes:", flushed)
	// Output:
	// alarm pending after the flush: false
	// flushes: [5]
}

// Reporter's alarm calls a downstream service that is down.
type Reporter struct{ st *core.State }

func (r *Reporter) Alarm(ctx context.Context, info core.AlarmInfo) error {
	if info.LastAttempt() {
		fmt.Println("last attempt, retry", info.RetryCount)
	}
	return errors.New("report service unavailable")
}

func ExampleAdmin_DeadLetters() {
	rt, _ := core.Open(core.Options{
		AlarmRetry: core.RetryPolicy{MaxRetries: -1}, // no retries: drop at the first failure
		OnAlarmDropped: func(dl core.DeadLetter) {
			fmt.Printf("dropped: %s/%s after %d attempt(s): %s\n", dl.Namespace, dl.Name, dl.Attempts, dl.LastError)
		},
	})
	defer rt.Close()
	ns, _ := core.Register(rt, "reporters", func(_ context.Context, st *core.State) (*Reporter, error) { return &Reporter{st: st}, nil })
	stub, _ := ns.Get("nightly")
	ctx := context.Background()
	core.Do(ctx, stub, func(ctx context.Context, r *Reporter) error { return r.st.SetAlarm(ctx, r.st.Now()) })
	stub.TriggerAlarm(ctx)

	dls, _ := rt.Admin().DeadLetters() // durable: survives restarts until re-armed
	fmt.Println("dead letters:", len(dls))
	rt.Admin().Rearm(ctx, dls[0].Seq, time.Now().Add(time.Hour)) // the service is back: try again in an hour
	dls, _ = rt.Admin().DeadLetters()
	fmt.Println("dead letters after re-arming:", len(dls))
	// Output:
	// last attempt, retry 0
	// dropped: reporters/nightly after 1 attempt(s): report service unavailable
	// dead letters: 1
	// dead letters after re-arming: 0
}

// Deliverer keeps a log of its delivery attempts. A failing run's writes
// are rolled back with it (SEMANTICS W4), so the entry is committed by an
// Await before the delivery that may fail: only what follows the Await
// rolls back.
type Deliverer struct {
	st   *core.State
	down bool // the downstream service
}

func (d *Deliverer) Alarm(ctx context.Context, info core.AlarmInfo) error {
	s := d.st.Storage()
	if _, err := s.Exec(ctx, "INSERT INTO attempts(at, retry) VALUES (?, ?)", d.st.Now().UnixMilli(), info.RetryCount); err != nil {
		return err
	}
	// Commit the entry now, in a segment of its own.
	if err := d.st.Await(ctx, func(context.Context) error { return nil }); err != nil {
		return err
	}
	if d.down {
		return errors.New("delivery failed") // retried; the entry stays
	}
	_, err := s.Exec(ctx, "UPDATE attempts SET delivered = 1 WHERE retry = ?", info.RetryCount)
	return err
}

func ExampleState_Await_attemptLog() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "deliverers", func(ctx context.Context, st *core.State) (*Deliverer, error) {
		err := st.Storage().Migrate(ctx, core.SQL("CREATE TABLE attempts(at INTEGER, retry INTEGER, delivered INTEGER NOT NULL DEFAULT 0)"))
		return &Deliverer{st: st, down: true}, err
	})
	stub, _ := ns.Get("order-9")
	ctx := context.Background()
	core.Do(ctx, stub, func(ctx context.Context, d *Deliverer) error { return d.st.SetAlarm(ctx, d.st.Now()) })
	stub.TriggerAlarm(ctx) // fails: a retry is pending
	core.Do(ctx, stub, func(ctx context.Context, d *Deliverer) error {
		var n, delivered int
		err := d.st.Storage().One(ctx, "SELECT count(*), coalesce(sum(delivered), 0) FROM attempts").Scan(&n, &delivered)
		fmt.Println("attempts logged:", n, "delivered:", delivered)
		d.down = false // the service is back
		return err
	})
	stub.TriggerAlarm(ctx) // the retry, now
	core.Do(ctx, stub, func(ctx context.Context, d *Deliverer) error {
		var n, delivered int
		err := d.st.Storage().One(ctx, "SELECT count(*), sum(delivered) FROM attempts").Scan(&n, &delivered)
		fmt.Println("attempts logged:", n, "delivered:", delivered)
		return err
	})
	// Output:
	// attempts logged: 1 delivered: 0
	// attempts logged: 2 delivered: 1
}

// Mailer keeps many timers over its one alarm.
type Mailer struct{ st *core.State }

func (m *Mailer) OnTimer(ctx context.Context, t core.Timer, info core.AlarmInfo) error {
	fmt.Printf("send %s to %s\n", t.Kind, t.Payload)
	return nil
}

func ExampleState_ScheduleAfter() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "mailers", func(_ context.Context, st *core.State) (*Mailer, error) { return &Mailer{st: st}, nil })
	stub, _ := ns.Get("user-7")
	core.Do(context.Background(), stub, func(ctx context.Context, m *Mailer) error {
		m.st.ScheduleAfter(ctx, "welcome", time.Hour, "welcome mail", []byte("ada@example.com"))
		m.st.ScheduleAfter(ctx, "nudge", 72*time.Hour, "reminder", []byte("ada@example.com"))
		m.st.ScheduleCron(ctx, "digest", "0 8 * * 1", "weekly digest", []byte("ada@example.com"), core.MissedSkip)
		m.st.CancelSchedule(ctx, "nudge") // she came back
		timers, _ := m.st.Schedules(ctx)  // soonest first
		for _, t := range timers {
			fmt.Printf("%s: %s (cron %q)\n", t.Key, t.Kind, t.Cron)
		}
		return nil
	})
	// Unordered output:
	// welcome: welcome mail (cron "")
	// digest: weekly digest (cron "0 8 * * 1")
}
