package core_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// failingClock is an object whose alarm always fails.
type failingClock struct{ st *core.State }

func (c *failingClock) Alarm(context.Context, core.AlarmInfo) error {
	return errors.New("alarm fails on purpose")
}

const hookPanic = "OnAlarmDropped hook panics on purpose"

// A panic in a user hook is recovered and logged. The scenario runs in a
// child process, so that a panic that is not recovered fails this test
// instead of killing the whole run: an alarm that fails with no retries
// is dead-lettered, the hook panics, and the process survives, the
// object keeps serving, and the panic is logged through Options.Logger.
func TestAlarm_DroppedHookPanicIsRecovered(t *testing.T) {
	if !isChild(t) {
		out, err := runChild(t)
		switch {
		case err != nil && strings.Contains(out, "panic: "+hookPanic):
			t.Fatalf("the process died of the OnAlarmDropped panic (%v); want it recovered and logged:\n%s", err, tail(out, 3000))
		case err != nil:
			t.Fatalf("the child failed (%v):\n%s", err, tail(out, 3000))
		}
		return
	}

	logs := newLogCapture()
	dropped := make(chan core.DeadLetter, 1)
	rt := openRuntime(t, core.Options{
		Logger:     slog.New(logs),
		AlarmRetry: core.RetryPolicy{MaxRetries: -1},
		OnAlarmDropped: func(dl core.DeadLetter) {
			dropped <- dl
			panic(hookPanic)
		},
	})
	ns, err := core.Register(rt, "clocks", func(_ context.Context, st *core.State) (*failingClock, error) {
		return &failingClock{st: st}, nil
	})
	require.NoError(t, err)
	stub, err := ns.Get("c1")
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, core.Do(ctx, stub, func(ctx context.Context, c *failingClock) error {
		return c.st.SetAlarm(ctx, c.st.Now())
	}))

	dl, ok := recvWithin(t, dropped, hangGuard, "the OnAlarmDropped hook")
	require.True(t, ok)
	if dl.Namespace != "clocks" || dl.Name != "c1" {
		t.Errorf("dead letter given to the hook: got %s/%s, want clocks/c1", dl.Namespace, dl.Name)
	}
	if _, ok := logs.waitFor(hookPanic, hangGuard); !ok {
		t.Errorf("no log record names the hook's panic %q; got %q", hookPanic, logs.all())
	}
	dls, err := rt.Admin().DeadLetters()
	require.NoError(t, err)
	if len(dls) != 1 || dls[0].Name != "c1" {
		t.Errorf("DeadLetters: got %+v, want one for c1", dls)
	}
	if err := core.Do(ctx, stub, func(ctx context.Context, c *failingClock) error {
		_, ok, err := c.st.GetAlarm(ctx)
		if ok {
			return errors.New("the dead-lettered alarm is still pending")
		}
		return err
	}); err != nil {
		t.Errorf("a call after the hook panicked: got %v, want nil (the object keeps serving)", err)
	}
}
