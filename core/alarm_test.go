package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// log records what objects did, with the (bubble) time, for assertions.
type log struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	at   time.Time
	obj  string
	kind string
	info core.AlarmInfo
	note string
}

func (l *log) add(e event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.at = time.Now()
	l.events = append(l.events, e)
}

func (l *log) of(kind string) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event
	for _, e := range l.events {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// clock is an object whose alarm behaviour a test chooses.
type clock struct {
	st      *core.State
	log     *log
	handler func(ctx context.Context, c *clock, info core.AlarmInfo) error
}

func (c *clock) Alarm(ctx context.Context, info core.AlarmInfo) error {
	_, pending, err := c.st.GetAlarm(ctx)
	if err != nil {
		return err
	}
	c.log.add(event{obj: c.st.Name(), kind: "alarm", info: info, note: fmt.Sprintf("pending=%v", pending)})
	if c.handler != nil {
		return c.handler(ctx, c, info)
	}
	return nil
}

type clockNS struct {
	rt  *core.Runtime
	ns  *core.Namespace[*clock]
	log *log
}

// openClocks opens a runtime whose "clocks" objects run handler on alarm
// and arm in their constructor with ctorArm, if set.
func openClocks(t testing.TB, opts core.Options, handler func(context.Context, *clock, core.AlarmInfo) error, ctor func(context.Context, *clock) error) *clockNS {
	t.Helper()
	rt := openRT(t, opts)
	l := &log{}
	ns, err := core.Register(rt, "clocks", func(ctx context.Context, st *core.State) (*clock, error) {
		c := &clock{st: st, log: l, handler: handler}
		l.add(event{obj: st.Name(), kind: "construct"})
		if ctor != nil {
			return c, ctor(ctx, c)
		}
		return c, nil
	})
	require.NoError(t, err)
	return &clockNS{rt: rt, ns: ns, log: l}
}

func (c *clockNS) do(t testing.TB, name string, fn func(context.Context, *clock) error) {
	t.Helper()
	s, err := c.ns.Get(name)
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, cl *clock) error { return fn(ctx, cl) }))
}

func (c *clockNS) alarm(t testing.TB, name string) (time.Time, bool) {
	t.Helper()
	var at time.Time
	var ok bool
	c.do(t, name, func(ctx context.Context, cl *clock) error {
		var err error
		at, ok, err = cl.st.GetAlarm(ctx)
		return err
	})
	return at, ok
}

var noJitter = core.Options{AlarmRetry: core.RetryPolicy{Jitter: -1}}

// S-A1, S-A2: one alarm per object; setting overwrites; delete clears.
func TestAlarm_ArmTwiceOverwrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, nil, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0.Add(30*time.Second)) })
		at, ok := c.alarm(t, "o")
		require.True(t, ok)
		require.True(t, at.Equal(t0.Add(30*time.Second)))
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0.Add(60*time.Second)) })
		at, ok = c.alarm(t, "o")
		require.True(t, ok)
		require.True(t, at.Equal(t0.Add(60*time.Second)), "overwritten")
		require.EqualValues(t, 1, c.rt.Stats().Alarms, "one alarm per object")
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.DeleteAlarm(ctx) })
		_, ok = c.alarm(t, "o")
		require.False(t, ok)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.Empty(t, c.log.of("alarm"), "a deleted alarm never fires")
	})
}

// S-A2, S-A3, S-A13: a successful run: info {0, false}; GetAlarm is none
// during the run and after it; the alarm counts as a row written (S-A11).
func TestAlarm_FiresOnceAndClears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, nil, nil)
		t0 := time.Now()
		var before core.StorageStats
		c.do(t, "o", func(ctx context.Context, cl *clock) error {
			before = cl.st.Storage().Stats()
			err := cl.st.SetAlarm(ctx, t0.Add(500*time.Millisecond))
			require.Equal(t, before.RowsWritten+1, cl.st.Storage().Stats().RowsWritten, "S-A11")
			return err
		})
		time.Sleep(time.Second)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 1)
		require.Equal(t, t0.Add(500*time.Millisecond), fires[0].at, "fires at its time")
		require.Equal(t, core.AlarmInfo{RetryCount: 0, IsRetry: false, MaxRetries: 6, Scheduled: t0.Add(500 * time.Millisecond)}, fires[0].info)
		require.Equal(t, "pending=false", fires[0].note, "S-A13")
		_, ok := c.alarm(t, "o")
		require.False(t, ok, "S-A2: none after a successful run")
		require.EqualValues(t, 0, c.rt.Stats().Alarms)
	})
}

// S-A5, S-A3: a handler that always fails runs exactly 7 times, 2, 4, 8,
// 16, 32 and 64 s apart, then never again; the drop reaches the
// dead-letter table and the hook, and can be re-armed.
func TestAlarm_RetryLadderThenDeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hooked []core.DeadLetter
		opts := noJitter
		opts.OnAlarmDropped = func(dl core.DeadLetter) { hooked = append(hooked, dl) }
		fail := true
		c := openClocks(t, opts, func(context.Context, *clock, core.AlarmInfo) error {
			if fail {
				return errors.New("downstream is down")
			}
			return nil
		}, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 7)
		offsets := []time.Duration{0, 2, 6, 14, 30, 62, 126}
		for i, f := range fires {
			require.Equal(t, offsets[i]*time.Second, f.at.Sub(t0), "run %d", i)
			require.Equal(t, i, f.info.RetryCount)
			require.Equal(t, i > 0, f.info.IsRetry)
			require.Equal(t, i == 6, f.info.LastAttempt())
		}
		_, ok := c.alarm(t, "o")
		require.False(t, ok, "dropped")
		dls, err := c.rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1)
		dl := dls[0]
		require.Equal(t, "clocks", dl.Namespace)
		require.Equal(t, "o", dl.Name)
		require.Equal(t, 7, dl.Attempts)
		require.Equal(t, "downstream is down", dl.LastError)
		require.True(t, dl.Scheduled.Equal(t0))
		require.Equal(t, t0.Add(126*time.Second), dl.Dropped)
		require.Equal(t, []core.DeadLetter{dl}, hooked)

		fail = false
		require.NoError(t, c.rt.Admin().Rearm(context.Background(), dl.Seq, time.Now()))
		synctest.Wait()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Len(t, c.log.of("alarm"), 8, "re-armed alarm ran")
		require.Equal(t, 0, c.log.of("alarm")[7].info.RetryCount)
		dls, err = c.rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Empty(t, dls)
	})
}

// S-A5, S-W2 with the default policy: 7 attempts, and each of the gaps of
// 2, 4, 8, 16, 32 and 64 s is lengthened by 0-25%.
func TestAlarm_RetryJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, func(context.Context, *clock, core.AlarmInfo) error { return errors.New("no") }, nil)
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, cl.st.Now()) })
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 7)
		for i := 1; i < 7; i++ {
			gap := fires[i].at.Sub(fires[i-1].at)
			base := time.Duration(1<<i) * time.Second
			require.GreaterOrEqual(t, gap, base, "retry %d", i)
			require.LessOrEqual(t, gap, base+base/4+time.Millisecond, "retry %d", i)
		}
	})
}

// S-A4: debounce: arm only when none is pending; 5 hits -> 1 flush of 5.
func TestAlarm_Debounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		flushed := map[string]int{}
		c := openClocks(t, core.Options{}, func(ctx context.Context, cl *clock, _ core.AlarmInfo) error {
			n, _, err := core.GetJSON[int](ctx, cl.st.Storage(), "hits")
			flushed[cl.st.Name()] += n
			cl.log.add(event{kind: "flush", note: fmt.Sprint(n)})
			if err != nil {
				return err
			}
			return core.PutJSON(ctx, cl.st.Storage(), "hits", 0)
		}, nil)
		armed := 0
		for range 5 {
			c.do(t, "o", func(ctx context.Context, cl *clock) error {
				n, _, err := core.GetJSON[int](ctx, cl.st.Storage(), "hits")
				if err != nil {
					return err
				}
				if err := core.PutJSON(ctx, cl.st.Storage(), "hits", n+1); err != nil {
					return err
				}
				if _, pending, err := cl.st.GetAlarm(ctx); err != nil || pending {
					return err
				}
				armed++
				return cl.st.SetAlarm(ctx, cl.st.Now().Add(2*time.Second))
			})
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		require.Equal(t, 1, armed)
		require.Len(t, c.log.of("flush"), 1)
		require.Equal(t, 5, flushed["o"])
		_, ok := c.alarm(t, "o")
		require.False(t, ok)
	})
}

// S-A6, S-W9: DeleteAll deletes the pending alarm; DeleteAllKeepAlarm keeps
// it. Both drop every SQL table (a later SELECT fails with "no such
// table"), view and index, and the KV pairs.
func TestAlarm_DeleteAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, nil, nil)
		for _, name := range []string{"gone", "kept"} {
			c.do(t, name, func(ctx context.Context, cl *clock) error {
				s := cl.st.Storage()
				if _, err := s.Exec(ctx, `CREATE TABLE a(x); CREATE TABLE b(y); CREATE INDEX bi ON b(y);
CREATE VIEW v AS SELECT x FROM a; INSERT INTO a VALUES (1)`); err != nil {
					return err
				}
				return errors.Join(s.Put(ctx, "k", []byte("v")), cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute)))
			})
		}
		c.do(t, "gone", func(ctx context.Context, cl *clock) error { return cl.st.Storage().DeleteAll(ctx) })
		c.do(t, "kept", func(ctx context.Context, cl *clock) error { return cl.st.Storage().DeleteAllKeepAlarm(ctx) })
		for _, name := range []string{"gone", "kept"} {
			c.do(t, name, func(ctx context.Context, cl *clock) error {
				s := cl.st.Storage()
				for _, tab := range []string{"a", "b", "v"} {
					_, err := s.Query(ctx, "SELECT * FROM "+tab)
					require.ErrorContains(t, err, "no such table: "+tab, name)
				}
				var n int
				require.NoError(t, s.One(ctx, "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE '\\_durable\\_%' ESCAPE '\\'").Scan(&n))
				require.Zero(t, n, "%s: nothing of the user's is left in the schema", name)
				es, err := s.List(ctx, core.ListOptions{})
				require.Empty(t, es, name)
				return err
			})
		}
		_, ok := c.alarm(t, "gone")
		require.False(t, ok)
		_, ok = c.alarm(t, "kept")
		require.True(t, ok)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 1)
		require.Equal(t, "kept", fires[0].obj)
	})
}

// S-A7, S-A8: an evicted object is re-created by its alarm: constructor,
// then Alarm, with its name available.
func TestAlarm_WakesEvictedObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{IdleTimeout: 10 * time.Second}, nil, nil)
		c.do(t, "sleeper", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute)) })
		time.Sleep(30 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 0, c.rt.Stats().Resident, "evicted while the alarm is pending")
		time.Sleep(31 * time.Second)
		synctest.Wait()
		c.log.mu.Lock()
		defer c.log.mu.Unlock()
		var kinds []string
		for _, e := range c.log.events {
			require.Equal(t, "sleeper", e.obj, "S-A8")
			kinds = append(kinds, e.kind)
		}
		require.Equal(t, []string{"construct", "construct", "alarm"}, kinds)
	})
}

// S-A9: only one Alarm runs at a time per object, even when the handler
// awaits and its alarm is re-armed to now meanwhile.
func TestAlarm_OneRunAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		running, most := 0, 0
		runs := 0
		c := openClocks(t, core.Options{}, func(ctx context.Context, cl *clock, _ core.AlarmInfo) error {
			running++
			most = max(most, running)
			runs++
			defer func() { running-- }()
			if runs < 3 {
				if err := cl.st.SetAlarm(ctx, cl.st.Now()); err != nil {
					return err
				}
			}
			return cl.st.Sleep(ctx, time.Second)
		}, nil)
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, cl.st.Now()) })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Equal(t, 3, runs)
		require.Equal(t, 1, most)
	})
}

// S-A10: a run that overstays the wall-time limit fails and is retried.
func TestAlarm_WallTimeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := noJitter
		opts.AlarmTimeout = time.Minute
		c := openClocks(t, opts, func(ctx context.Context, cl *clock, info core.AlarmInfo) error {
			if info.RetryCount > 0 {
				return nil
			}
			<-ctx.Done() // a handler that honours its context
			cl.log.add(event{kind: "timeout", note: ctx.Err().Error()})
			return nil // and even claims success
		}, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 2)
		require.Equal(t, time.Minute+2*time.Second, fires[1].at.Sub(t0), "retried 2 s after the limit")
		require.Equal(t, "context deadline exceeded", c.log.of("timeout")[0].note)
	})
}

// S-A14: if the failing handler set a new alarm, that one stands and the
// failed one is not retried.
func TestAlarm_FailedHandlerThatRearmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, noJitter, func(ctx context.Context, cl *clock, info core.AlarmInfo) error {
			if cl.log.of("alarm")[0].at.Equal(time.Now()) && len(cl.log.of("alarm")) == 1 {
				if err := cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Hour)); err != nil {
					return err
				}
				return errors.New("failed after re-arming")
			}
			return nil
		}, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Len(t, c.log.of("alarm"), 1, "no retry")
		at, ok := c.alarm(t, "o")
		require.True(t, ok)
		require.Equal(t, t0.Add(time.Hour), at)
		time.Sleep(time.Hour)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 2)
		require.Equal(t, 0, fires[1].info.RetryCount)
	})
}

// S-A15: alarms do not repeat; periodic work re-arms at the end of Alarm.
func TestAlarm_PeriodicRearm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, func(ctx context.Context, cl *clock, _ core.AlarmInfo) error {
			if len(cl.log.of("alarm")) < 3 {
				return cl.st.SetAlarm(ctx, cl.st.Now().Add(10*time.Second))
			}
			return nil
		}, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0.Add(10*time.Second)) })
		time.Sleep(time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 3)
		for i, f := range fires {
			require.Equal(t, time.Duration(i+1)*10*time.Second, f.at.Sub(t0))
		}
	})
}

// S-A16: a constructor that arms only when none is set does not postpone a
// pending alarm across evictions.
func TestAlarm_ConstructorChecksFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{IdleTimeout: 5 * time.Second}, nil, func(ctx context.Context, cl *clock) error {
			if _, ok, err := cl.st.GetAlarm(ctx); err != nil || ok {
				return err
			}
			if len(cl.log.of("alarm")) > 0 {
				return nil
			}
			return cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute))
		})
		t0 := time.Now()
		c.do(t, "o", func(context.Context, *clock) error { return nil })
		for range 5 { // wake it now and then: each wake re-runs the constructor
			time.Sleep(10 * time.Second)
			c.do(t, "o", func(context.Context, *clock) error { return nil })
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 1)
		require.Equal(t, time.Minute, fires[0].at.Sub(t0), "not postponed by the wakes")
		require.GreaterOrEqual(t, len(c.log.of("construct")), 5)
	})
}

// Bad input: a time at or before the epoch is refused; one in the past fires at once;
// one far in the future waits; a panicking handler is a failure and is
// retried; DeleteAlarm cancels a pending retry; an object without an Alarm
// method cannot arm.
func TestAlarm_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		panics := true
		c := openClocks(t, noJitter, func(_ context.Context, cl *clock, info core.AlarmInfo) error {
			switch cl.st.Name() {
			case "panicky":
				if panics && info.RetryCount == 0 {
					panic("handler bug")
				}
			case "cancelled":
				return errors.New("always")
			}
			return nil
		}, nil)
		// S-W5: a time at or before the Unix epoch is refused, and nothing is armed.
		for _, at := range []time.Time{time.Time{}, time.UnixMilli(0), time.UnixMilli(-1), time.Unix(0, 999_999)} {
			err := core.Do(context.Background(), mustGet(t, c.ns, "zero"), func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, at) })
			require.ErrorIs(t, err, core.ErrInvalidArgument, "%v", at)
			require.ErrorContains(t, err, "at or before the Unix epoch")
			_, ok := c.alarm(t, "zero")
			require.False(t, ok)
		}
		t0 := time.Now()
		c.do(t, "past", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, time.UnixMilli(1)) })
		c.do(t, "future", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0.Add(200*365*24*time.Hour)) })
		c.do(t, "panicky", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		c.do(t, "cancelled", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		synctest.Wait()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		c.do(t, "cancelled", func(ctx context.Context, cl *clock) error { return cl.st.DeleteAlarm(ctx) }) // its first retry is pending
		time.Sleep(time.Hour)
		synctest.Wait()
		count := map[string]int{}
		for _, e := range c.log.of("alarm") {
			count[e.obj]++
			if e.obj == "past" {
				require.Equal(t, t0, e.at, "a past time (1 ms after the epoch) fires at once")
			}
		}
		require.Equal(t, map[string]int{"past": 1, "panicky": 2, "cancelled": 1}, count)
		_, ok := c.alarm(t, "future")
		require.True(t, ok)

		rt := c.rt
		plain, err := core.Register(rt, "plain", newItem)
		require.NoError(t, err)
		err = core.Do(context.Background(), get(t, plain, "p"), func(ctx context.Context, it *item) error { return it.st.SetAlarm(ctx, it.st.Now()) })
		require.ErrorContains(t, err, "do not implement core.Alarmer")
	})
}

func mustGet[T any](t testing.TB, ns *core.Namespace[T], name string) *core.Stub[T] {
	t.Helper()
	s, err := ns.Get(name)
	require.NoError(t, err)
	return s
}

// Alarms survive Close and Open: 1,000 objects, each fires once.
func TestAlarm_SurviveRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		ns, err := core.Register(rt, "clocks", func(_ context.Context, st *core.State) (*clock, error) { return &clock{st: st, log: &log{}}, nil })
		require.NoError(t, err)
		due := time.Now().Add(time.Minute)
		var wg sync.WaitGroup
		for i := range 1000 {
			wg.Go(func() {
				require.NoError(t, core.Do(context.Background(), mustGet(t, ns, fmt.Sprint("o", i)), func(ctx context.Context, cl *clock) error {
					return cl.st.SetAlarm(ctx, due)
				}))
			})
		}
		wg.Wait()
		require.EqualValues(t, 1000, rt.Stats().Alarms)
		require.NoError(t, rt.Close())

		rt2, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		defer rt2.Close()
		require.EqualValues(t, 1000, rt2.Stats().Alarms, "loaded from the index")
		l := &log{}
		_, err = core.Register(rt2, "clocks", func(_ context.Context, st *core.State) (*clock, error) { return &clock{st: st, log: l}, nil })
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		fires := l.of("alarm")
		require.Len(t, fires, 1000)
		seen := map[string]bool{}
		for _, f := range fires {
			require.False(t, seen[f.obj], "fired twice: %s", f.obj)
			seen[f.obj] = true
			require.Equal(t, due, f.at)
		}
		require.EqualValues(t, 0, rt2.Stats().Alarms)
	})
}

// Alarms that fall due before their namespace is registered (at start-up)
// wait for the registration, then fire.
func TestAlarm_DueBeforeRegister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		ns, err := core.Register(rt, "clocks", func(_ context.Context, st *core.State) (*clock, error) { return &clock{st: st, log: &log{}}, nil })
		require.NoError(t, err)
		for i := range 10 {
			require.NoError(t, core.Do(context.Background(), mustGet(t, ns, fmt.Sprint("o", i)), func(ctx context.Context, cl *clock) error {
				return cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute))
			}))
		}
		require.NoError(t, rt.Close())
		time.Sleep(2 * time.Minute)

		rt2, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		defer rt2.Close()
		synctest.Wait() // the due alarms find no namespace yet
		l := &log{}
		_, err = core.Register(rt2, "clocks", func(_ context.Context, st *core.State) (*clock, error) { return &clock{st: st, log: l}, nil })
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Len(t, l.of("alarm"), 10)
	})
}

// S-A14: an alarm set by another turn while the failing handler was
// inside Await stands; the failed run is not retried over it.
func TestAlarm_SetByAnotherTurnDuringAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, noJitter, func(ctx context.Context, cl *clock, info core.AlarmInfo) error {
			if err := cl.st.Sleep(ctx, time.Second); err != nil {
				return err
			}
			if info.RetryCount == 0 && len(cl.log.of("alarm")) == 1 {
				return errors.New("fails after the await")
			}
			return nil
		}, nil)
		t0 := time.Now()
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		time.Sleep(500 * time.Millisecond)
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0.Add(time.Hour)) })
		time.Sleep(time.Minute)
		synctest.Wait()
		at, ok := c.alarm(t, "o")
		require.True(t, ok)
		require.Equal(t, t0.Add(time.Hour), at, "the other turn's alarm stands")
		require.Len(t, c.log.of("alarm"), 1, "no retry of the failed run")
	})
}

// S-W1: while retries of a failed alarm are pending, GetAlarm from a call
// returns the time the alarm was set for, throughout; inside the handler
// it is none in every attempt; after the 7th failed attempt it is none.
func TestAlarm_GetAlarmDuringRetriesIsTheTimeSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, core.Options{}, func(context.Context, *clock, core.AlarmInfo) error { return errors.New("down") }, nil)
		t0 := time.Now()
		set := t0.Add(time.Second)
		c.do(t, "o", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, set) })
		for _, look := range []time.Duration{2, 5, 10, 20, 40, 80, 120} {
			time.Sleep(time.Until(t0.Add(look * time.Second)))
			synctest.Wait()
			runs := len(c.log.of("alarm"))
			require.Less(t, runs, 7, "at t+%v", look)
			at, ok := c.alarm(t, "o")
			require.True(t, ok, "at t+%v, after %d runs", look, runs)
			require.True(t, at.Equal(set), "at t+%v: GetAlarm %v, want the time set %v", look, at, set)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 7)
		for _, f := range fires {
			require.Equal(t, "pending=false", f.note, "none inside the handler (retry %d)", f.info.RetryCount)
			require.True(t, f.info.Scheduled.Equal(set))
		}
		_, ok := c.alarm(t, "o")
		require.False(t, ok, "none after the 7th failed attempt")
	})
}

// S-W3: a handler that sets a new alarm and then fails is not retried: the
// new alarm runs at its time as a first attempt. Set-then-fail on every
// run runs at each new time for ever, never retried; set-then-return runs
// once more at its time.
func TestAlarm_SetThenFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, noJitter, func(ctx context.Context, cl *clock, info core.AlarmInfo) error {
			switch cl.st.Name() {
			case "always":
				if err := cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute)); err != nil {
					return err
				}
				return errors.New("failed after setting")
			case "returns":
				if len(cl.log.of("alarm")) == 1 {
					return cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Minute))
				}
			}
			return nil
		}, nil)
		t0 := time.Now()
		c.do(t, "always", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t0) })
		time.Sleep(10*time.Minute + time.Second)
		synctest.Wait()
		fires := c.log.of("alarm")
		require.Len(t, fires, 11, "one run a minute, no retries in between")
		for i, f := range fires {
			require.Equal(t, t0.Add(time.Duration(i)*time.Minute), f.at)
			require.Equal(t, 0, f.info.RetryCount, "run %d is a first attempt", i)
		}
		at, ok := c.alarm(t, "always")
		require.True(t, ok)
		require.Equal(t, t0.Add(11*time.Minute), at)

		c.log.mu.Lock()
		c.log.events = nil
		c.log.mu.Unlock()
		t1 := time.Now()
		c.do(t, "returns", func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, t1) })
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		var runs []time.Time
		for _, f := range c.log.of("alarm") {
			if f.obj == "returns" {
				runs = append(runs, f.at)
			}
		}
		require.Equal(t, []time.Time{t1, t1.Add(time.Minute)}, runs)
	})
}

// S-W4: a failing run's writes are rolled back here (the original keeps
// them): a deliberate difference. The recipe that keeps an attempt log
// anyway writes the entry and commits it with an Await before the work
// that may fail: only what follows the Await is rolled back.
func TestAlarm_AttemptLogRecipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := openClocks(t, noJitter, func(ctx context.Context, cl *clock, info core.AlarmInfo) error {
			s := cl.st.Storage()
			if _, err := s.Exec(ctx, "INSERT INTO attempts(retry) VALUES (?)", info.RetryCount); err != nil {
				return err
			}
			if cl.st.Name() == "logged" { // the recipe: commit the entry, then work
				if err := cl.st.Await(ctx, func(context.Context) error { return nil }); err != nil {
					return err
				}
			}
			if _, err := s.Exec(ctx, "INSERT INTO work(v) VALUES (1)"); err != nil {
				return err
			}
			return errors.New("downstream is down")
		}, func(ctx context.Context, cl *clock) error {
			_, err := cl.st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS attempts(retry INTEGER); CREATE TABLE IF NOT EXISTS work(v INTEGER)")
			return err
		})
		for _, name := range []string{"logged", "plain"} {
			c.do(t, name, func(ctx context.Context, cl *clock) error { return cl.st.SetAlarm(ctx, cl.st.Now()) })
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		count := func(name, table string) (n int) {
			c.do(t, name, func(ctx context.Context, cl *clock) error {
				return cl.st.Storage().One(ctx, "SELECT count(*) FROM "+table).Scan(&n)
			})
			return n
		}
		require.Equal(t, 7, count("logged", "attempts"), "one entry per failed attempt, kept")
		require.Equal(t, 0, count("logged", "work"), "the failing work rolled back")
		require.Equal(t, 0, count("plain", "attempts"), "without the Await the entry rolls back with the run")
		require.Equal(t, 0, count("plain", "work"))
	})
}
