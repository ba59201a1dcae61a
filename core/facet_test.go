package core_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// workspace hosts processor facets.
type workspace struct{ st *core.State }

func (w *workspace) Alarm(context.Context, core.AlarmInfo) error {
	facetLog.add(event{obj: "workspace", kind: "alarm"})
	return nil
}

// processor is a facet with its own table and a keepalive alarm.
type processor struct {
	st   *core.State
	fail bool
}

var facetLog = &log{} // reset by each test

var keepaliveStart time.Time

func (p *processor) Alarm(ctx context.Context, info core.AlarmInfo) error {
	facetLog.add(event{obj: p.st.FacetPath(), kind: "alarm", info: info})
	if p.fail {
		return errors.New("processor down")
	}
	if p.st.Name() == "k" && info.Scheduled.Sub(keepaliveStart) < 40*time.Second {
		// A keepalive re-arms itself, to the millisecond.
		if err := p.st.SetAlarm(ctx, info.Scheduled.Add(10*time.Second)); err != nil {
			return err
		}
	}
	// Idempotent: the keepalive stores the absolute time it ran for.
	_, err := p.st.Storage().Exec(ctx, "INSERT INTO beat(at) VALUES (?) ON CONFLICT DO NOTHING", info.Scheduled.UnixNano())
	return err
}

type facetWorld struct {
	rt    *core.Runtime
	ws    *core.Namespace[*workspace]
	procs *core.FacetKind[*processor]
	subs  *core.FacetKind[*processor]
}

func openFacets(t testing.TB, opts core.Options) *facetWorld {
	t.Helper()
	facetLog = &log{}
	w := &facetWorld{rt: openRT(t, opts)}
	var err error
	w.ws, err = core.Register(w.rt, "workspaces", func(_ context.Context, st *core.State) (*workspace, error) { return &workspace{st: st}, nil })
	require.NoError(t, err)
	newProc := func(ctx context.Context, st *core.State) (*processor, error) {
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS beat(at INTEGER PRIMARY KEY)")
		return &processor{st: st, fail: st.Name() == "broken"}, err
	}
	w.procs, err = core.RegisterFacet(w.rt, w.ws, "proc", newProc)
	require.NoError(t, err)
	w.subs, err = core.RegisterFacet(w.rt, w.procs, "sub", newProc)
	require.NoError(t, err)
	return w
}

// facet returns the stub of facet name of workspace ws, obtained through
// the workspace (a parent hands out its facets' stubs).
func (w *facetWorld) facet(t testing.TB, ws, name string) *core.Stub[*processor] {
	t.Helper()
	p, err := core.Call(context.Background(), mustGet(t, w.ws, ws), func(_ context.Context, o *workspace) (*core.Stub[*processor], error) {
		return w.procs.Get(o.st, name)
	})
	require.NoError(t, err)
	return p
}

func beats(t testing.TB, s *core.Stub[*processor]) int {
	t.Helper()
	n, err := core.Call(context.Background(), s, func(ctx context.Context, p *processor) (int, error) {
		var n int
		err := p.st.Storage().QueryRow(ctx, "SELECT count(*) FROM beat").Scan(&n)
		return n, err
	})
	require.NoError(t, err)
	return n
}

// S-F1: a facet has storage of its own, in its parent's directory; the
// parent's DeleteAll deletes its facets too.
func TestFacet_OwnStorageAndDeleteAll(t *testing.T) {
	dir := t.TempDir()
	w := openFacets(t, core.Options{Dir: dir})
	a, b := w.facet(t, "ws", "a"), w.facet(t, "ws", "b")
	for i, s := range []*core.Stub[*processor]{a, a, b} {
		require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, p *processor) error {
			_, err := p.st.Storage().Exec(ctx, "INSERT INTO beat(at) VALUES (?)", i)
			return err
		}))
	}
	require.Equal(t, 2, beats(t, a))
	require.Equal(t, 1, beats(t, b))
	files, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*.facets", "*.sqlite"))
	require.Len(t, files, 2, "one database per facet, under the parent's directory")

	require.NoError(t, core.Do(context.Background(), mustGet(t, w.ws, "ws"), func(ctx context.Context, o *workspace) error {
		return o.st.Storage().DeleteAll(ctx)
	}))
	files, _ = filepath.Glob(filepath.Join(dir, "workspaces", "*.facets", "*.sqlite"))
	require.Empty(t, files)
	require.Equal(t, 0, beats(t, a), "a deleted facet comes back empty")
}

// S-F2: arming in a facet while 64 unrelated calls run on the parent
// works at once, and every one of those calls succeeds. Arming that cannot
// work (a facet kind without an Alarm method, a time before the epoch)
// fails at once, in the call that armed, with a clear error; the call can
// go on and commit, and nothing else fails later.
func TestFacet_ArmingNeverBreaksOtherCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openFacets(t, core.Options{})
		plain, err := core.RegisterFacet(w.rt, w.ws, "plain", newItem)
		require.NoError(t, err)
		ws := mustGet(t, w.ws, "ws")
		p := w.facet(t, "ws", "a")
		pl, err := core.Call(context.Background(), ws, func(_ context.Context, o *workspace) (*core.Stub[*item], error) {
			return plain.Get(o.st, "x")
		})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				require.NoError(t, core.Do(context.Background(), ws, func(ctx context.Context, o *workspace) error {
					return o.st.Sleep(ctx, time.Duration(i)*time.Millisecond)
				}))
			})
		}
		due := time.Now().Add(time.Second)
		require.NoError(t, core.Do(context.Background(), p, func(ctx context.Context, pr *processor) error {
			if err := pr.st.SetAlarm(ctx, due); err != nil {
				return err
			}
			at, ok, err := pr.st.GetAlarm(ctx)
			require.True(t, ok)
			require.Equal(t, due, at)
			return err
		}))
		require.NoError(t, core.Do(context.Background(), pl, func(ctx context.Context, it *item) error {
			err := it.st.SetAlarm(ctx, due)
			require.ErrorContains(t, err, "do not implement core.Alarmer")
			return it.setStock(ctx, 3) // the call goes on
		}))
		require.NoError(t, core.Do(context.Background(), p, func(ctx context.Context, pr *processor) error {
			require.ErrorIs(t, pr.st.SetAlarm(ctx, time.UnixMilli(0)), core.ErrInvalidArgument)
			_, ok, err := pr.st.GetAlarm(ctx)
			require.True(t, ok, "the refused time left the alarm set before in place")
			return err
		}))
		wg.Wait()
		n, err := core.Call(context.Background(), pl, func(ctx context.Context, it *item) (int, error) { return it.stock(ctx) })
		require.NoError(t, err)
		require.Equal(t, 3, n, "the call that failed to arm committed")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		fires := facetLog.of("alarm")
		require.Len(t, fires, 1)
		require.Equal(t, due, fires[0].at)
		require.Equal(t, "proc=a", fires[0].obj)
		require.NoError(t, core.Do(context.Background(), ws, func(context.Context, *workspace) error { return nil }), "the parent still serves")
	})
}

// S-F3: a facet's alarm fires after its parent was evicted, and after a
// restart of the runtime (constructor of the facet, then its handler).
func TestFacet_AlarmSurvivesEvictionAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		w := openFacets(t, core.Options{Dir: dir, IdleTimeout: time.Second})
		p := w.facet(t, "ws", "a")
		due := time.Now().Add(time.Minute)
		require.NoError(t, core.Do(context.Background(), p, func(ctx context.Context, pr *processor) error { return pr.st.SetAlarm(ctx, due) }))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 0, w.rt.Stats().Resident, "parent and facet evicted")
		require.NoError(t, w.rt.Close())

		w2 := openFacets(t, core.Options{Dir: dir})
		time.Sleep(time.Minute)
		synctest.Wait()
		fires := facetLog.of("alarm")
		require.Len(t, fires, 1)
		require.Equal(t, due, fires[0].at)
		require.Equal(t, 1, beats(t, w2.facet(t, "ws", "a")))
	})
}

// S-F4: millisecond arming: a 10 s keepalive that re-arms itself fires on
// time, every time; a spurious fire (the facet's turn failed after it
// armed) is tolerated by the idempotent handler.
func TestFacet_Keepalive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openFacets(t, core.Options{})
		p := w.facet(t, "ws", "k")
		t0 := time.Now()
		keepaliveStart = t0
		// The facet's turn fails after arming: the alarm stays armed (it
		// is committed in the parent at once), a possibly spurious fire
		// that the idempotent handler tolerates.
		err := core.Do(context.Background(), p, func(ctx context.Context, pr *processor) error {
			if err := pr.st.SetAlarm(ctx, t0.Add(10*time.Second+7*time.Millisecond)); err != nil {
				return err
			}
			return errors.New("fails after arming")
		})
		require.Error(t, err)
		time.Sleep(time.Minute)
		synctest.Wait()
		fires := facetLog.of("alarm")
		require.Len(t, fires, 4)
		for i, f := range fires {
			require.Equal(t, time.Duration(i+1)*10*time.Second+7*time.Millisecond, f.at.Sub(t0), "fire %d on time", i)
		}
		require.Equal(t, 4, beats(t, p))
	})
}

// S-F5 (and S-A5 per facet): the parent's alarm and three facets' alarms
// due in interleaved order fire in time order; the failing facet runs
// exactly 7 times, 2-64 s apart, and is dead-lettered under its path,
// while its siblings fire on time.
func TestFacet_SharedAlarmInTimeOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := noJitter
		var dropped []core.DeadLetter
		opts.OnAlarmDropped = func(dl core.DeadLetter) { dropped = append(dropped, dl) }
		w := openFacets(t, opts)
		t0 := time.Now()
		arm := func(name string, d time.Duration) {
			require.NoError(t, core.Do(context.Background(), w.facet(t, "ws", name), func(ctx context.Context, pr *processor) error {
				return pr.st.SetAlarm(ctx, t0.Add(d))
			}))
		}
		arm("c", 3*time.Second)
		arm("broken", 1*time.Second)
		arm("a", 4*time.Second)
		require.NoError(t, core.Do(context.Background(), mustGet(t, w.ws, "ws"), func(ctx context.Context, o *workspace) error {
			return o.st.SetAlarm(ctx, t0.Add(2*time.Second))
		}))
		require.EqualValues(t, 1, w.rt.Stats().Alarms, "one real alarm for the parent and its facets")
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		var order []string
		var broken []time.Duration
		for _, e := range facetLog.of("alarm") {
			if e.obj == "proc=broken" {
				broken = append(broken, e.at.Sub(t0))
				continue
			}
			order = append(order, fmt.Sprintf("%s@%v", e.obj, e.at.Sub(t0)))
		}
		require.Equal(t, []string{"workspace@2s", "proc=c@3s", "proc=a@4s"}, order)
		require.Equal(t, []time.Duration{1, 3, 7, 15, 31, 63, 127}, func() []time.Duration {
			out := make([]time.Duration, len(broken))
			for i, b := range broken {
				out[i] = b / time.Second
			}
			return out
		}())
		require.Len(t, dropped, 1)
		require.Equal(t, "ws", dropped[0].Name)
		require.Equal(t, "proc=broken", dropped[0].Path)
		require.Equal(t, 7, dropped[0].Attempts)
	})
}

// Nested facets (3 levels) have alarms too; names are validated.
func TestFacet_NestedAlarms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openFacets(t, core.Options{})
		mid := w.facet(t, "ws", "mid")
		leaf, err := core.Call(context.Background(), mid, func(_ context.Context, pr *processor) (*core.Stub[*processor], error) {
			return w.subs.Get(pr.st, "leaf/1")
		})
		require.NoError(t, err)
		t0 := time.Now()
		require.NoError(t, core.Do(context.Background(), leaf, func(ctx context.Context, pr *processor) error {
			return pr.st.SetAlarm(ctx, t0.Add(time.Second))
		}))
		require.NoError(t, core.Do(context.Background(), mid, func(ctx context.Context, pr *processor) error {
			return pr.st.SetAlarm(ctx, t0.Add(2*time.Second))
		}))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		fires := facetLog.of("alarm")
		require.Len(t, fires, 2)
		require.Equal(t, "proc=mid/sub=leaf%2F1", fires[0].obj)
		require.Equal(t, "proc=mid", fires[1].obj)
		require.Equal(t, 1, beats(t, leaf))

		_, err = core.Call(context.Background(), mustGet(t, w.ws, "ws"), func(_ context.Context, o *workspace) (*core.Stub[*processor], error) {
			return w.subs.Get(o.st, "x") // a sub is hosted by a proc, not a workspace
		})
		require.ErrorContains(t, err, "not hosted by")
		_, err = core.Call(context.Background(), mustGet(t, w.ws, "ws"), func(_ context.Context, o *workspace) (*core.Stub[*processor], error) {
			return w.procs.Get(o.st, "")
		})
		require.ErrorIs(t, err, core.ErrInvalidName)
	})
}

var _ = os.Remove
