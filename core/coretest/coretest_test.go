package coretest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

type reminder struct {
	st    *core.State
	fired *int
}

func (r *reminder) Alarm(context.Context, core.AlarmInfo) error { *r.fired++; return nil }

// The recipe of the package doc works: an hour passes in no time.
func TestOpen_InsideSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := coretest.Open(t, core.Options{})
		fired := 0
		ns, err := core.Register(rt, "reminders", func(_ context.Context, st *core.State) (*reminder, error) {
			return &reminder{st: st, fired: &fired}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		stub, _ := ns.Get("r")
		err = core.Do(context.Background(), stub, func(ctx context.Context, r *reminder) error {
			return r.st.SetAlarm(ctx, r.st.Now().Add(time.Hour))
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fired != 1 {
			t.Fatalf("fired %d times, want 1", fired)
		}
	})
}

// Outside a bubble, TriggerAlarm runs a pending alarm at once.
func TestTriggerAlarm(t *testing.T) {
	rt := coretest.Open(t, core.Options{})
	fired := 0
	ns, err := core.Register(rt, "reminders", func(_ context.Context, st *core.State) (*reminder, error) {
		return &reminder{st: st, fired: &fired}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stub, _ := ns.Get("r")
	had, err := stub.TriggerAlarm(context.Background())
	if err != nil || had {
		t.Fatalf("TriggerAlarm with no alarm = %v, %v; want false, nil", had, err)
	}
	err = core.Do(context.Background(), stub, func(ctx context.Context, r *reminder) error {
		return r.st.SetAlarm(ctx, r.st.Now().Add(24*time.Hour))
	})
	if err != nil {
		t.Fatal(err)
	}
	had, err = stub.TriggerAlarm(context.Background())
	if err != nil || !had {
		t.Fatalf("TriggerAlarm = %v, %v; want true, nil", had, err)
	}
	if fired != 1 {
		t.Fatalf("fired %d times, want 1", fired)
	}
	pending, err := core.Call(context.Background(), stub, func(ctx context.Context, r *reminder) (bool, error) {
		_, ok, err := r.st.GetAlarm(ctx)
		return ok, err
	})
	if err != nil || pending {
		t.Fatalf("after the run: pending = %v, %v; want false, nil", pending, err)
	}
}
