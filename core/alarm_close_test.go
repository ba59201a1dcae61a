package core_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
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
