package core_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// closingRoot's and closingFacet's alarms wait for their run's context to
// end (the runtime closing) and return nil.
type closingRoot struct {
	st      *core.State
	started chan string
}

func (r *closingRoot) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	r.started <- "root"
	<-ctx.Done()
	return nil
}

type closingFacet struct {
	st      *core.State
	started chan string
}

func (f *closingFacet) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	f.started <- "facet"
	<-ctx.Done()
	return nil
}

// S-A10: a timer run cut short by the runtime's shutdown fails as such,
// not as a run over its time limit: the retry it leaves is logged with
// ErrClosed, for a root's alarm and a facet's alike.
func TestAlarm_RunCutByCloseIsNotOverTheLimit(t *testing.T) {
	for _, kind := range []string{"root", "facet"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			logs := newLogCapture()
			rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(logs)})
			require.NoError(t, err)
			started := make(chan string, 1)
			roots, err := core.Register(rt, "roots", func(_ context.Context, st *core.State) (*closingRoot, error) {
				return &closingRoot{st: st, started: started}, nil
			})
			require.NoError(t, err)
			facets, err := core.RegisterFacet(rt, roots, "f", func(_ context.Context, st *core.State) (*closingFacet, error) {
				return &closingFacet{st: st, started: started}, nil
			})
			require.NoError(t, err)
			r, err := roots.Get("r")
			require.NoError(t, err)
			if kind == "root" {
				require.NoError(t, core.Do(ctx, r, func(ctx context.Context, o *closingRoot) error {
					return o.st.SetAlarm(ctx, time.Now())
				}))
			} else {
				f, err := core.Call(ctx, r, func(_ context.Context, o *closingRoot) (*core.Stub[*closingFacet], error) {
					return facets.Get(o.st, "f")
				})
				require.NoError(t, err)
				require.NoError(t, core.Do(ctx, f, func(ctx context.Context, o *closingFacet) error {
					return o.st.SetAlarm(ctx, time.Now())
				}))
			}
			got, ok := recvWithin(t, started, hangGuard, "the alarm's run")
			require.True(t, ok)
			require.Equal(t, kind, got)
			require.NoError(t, rt.Close())
			rec, ok := logs.find("event=alarm_retry")
			require.True(t, ok, "the cut run is retried: %v", logs.all())
			if strings.Contains(rec, "over the limit") || !strings.Contains(rec, core.ErrClosed.Error()) {
				t.Errorf("the retry's cause: got %q, want %q", rec, core.ErrClosed)
			}
		})
	}
}

// cutOnce's alarm waits, on its first run, for its run's context to end
// (the runtime closing); later runs are recorded.
type cutOnce struct {
	started chan struct{}
	mu      sync.Mutex
	runs    []core.AlarmInfo
	at      []time.Time
}

type cutter struct {
	st *core.State
	c  *cutOnce
}

func (x *cutter) Alarm(ctx context.Context, info core.AlarmInfo) error {
	c := x.c
	c.mu.Lock()
	started := c.started
	c.started = nil
	if started == nil {
		c.runs, c.at = append(c.runs, info), append(c.at, time.Now())
	}
	c.mu.Unlock()
	if started != nil {
		close(started)
		<-ctx.Done()
	}
	return nil
}

// cutAndReopen opens a runtime with opts in a new directory, arms an alarm for now on one object,
// closes the runtime while the alarm's run waits in c, and opens the runtime again: it returns the
// reopened runtime and when it was opened.
func cutAndReopen(t *testing.T, c *cutOnce, opts core.Options) (*core.Runtime, time.Time) {
	t.Helper()
	started := c.started // read before the handler clears it
	opts.Dir, opts.Logger = t.TempDir(), slog.New(slog.DiscardHandler)
	open := func() (*core.Runtime, *core.Namespace[*cutter]) {
		rt, err := core.Open(opts)
		require.NoError(t, err)
		ns, err := core.Register(rt, "cut", func(_ context.Context, st *core.State) (*cutter, error) { return &cutter{st: st, c: c}, nil })
		require.NoError(t, err)
		return rt, ns
	}
	rt, ns := open()
	stub, err := ns.Get("o")
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, x *cutter) error {
		return x.st.SetAlarm(ctx, time.Now())
	}))
	<-started
	require.NoError(t, rt.Close())
	reopened := time.Now()
	rt, _ = open()
	return rt, reopened
}

// S-A10, S-CL9: a run cut short by the runtime's shutdown is retried at once
// where the object is served next, not after the retry policy's delay (2 s):
// reopened at once, the runtime runs it at once, as a retry.
func TestAlarm_RunCutByCloseRetriedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &cutOnce{started: make(chan struct{})}
		rt, reopened := cutAndReopen(t, c, core.Options{})
		defer rt.Close()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		require.Len(t, c.runs, 1, "the cut run ran again once")
		require.Equal(t, 1, c.runs[0].RetryCount, "as a retry")
		require.Less(t, c.at[0].Sub(reopened), 500*time.Millisecond, "it ran %v after the runtime opened again", c.at[0].Sub(reopened))
	})
}

// S-A10: a run cut short by shutdown spends no retry of the policy: with no retries at all
// (MaxRetries negative), a failed run would be a dead letter, but a cut run runs again.
func TestAlarm_RunCutByCloseNeverDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &cutOnce{started: make(chan struct{})}
		rt, _ := cutAndReopen(t, c, core.Options{AlarmRetry: core.RetryPolicy{MaxRetries: -1}})
		defer rt.Close()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		dls, err := rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Empty(t, dls, "a run cut by shutdown is not a failure")
		c.mu.Lock()
		defer c.mu.Unlock()
		require.Len(t, c.runs, 1, "the cut run ran again")
	})
}
