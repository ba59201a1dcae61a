package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// planner keeps a schedule (and an alarm); its handlers log what ran.
type planner struct {
	st      *core.State
	mu      *sync.Mutex
	ran     *[]ran
	onTimer func(ctx context.Context, p *planner, t core.Timer, info core.AlarmInfo) error
}

type ran struct {
	key   string
	at    time.Time
	retry int
}

func (p *planner) record(key string, info core.AlarmInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.ran = append(*p.ran, ran{key: key, at: time.Now(), retry: info.RetryCount})
}

func (p *planner) Alarm(_ context.Context, info core.AlarmInfo) error {
	p.record("<alarm>", info)
	return nil
}

func (p *planner) OnTimer(ctx context.Context, t core.Timer, info core.AlarmInfo) error {
	p.record(t.Key, info)
	if p.onTimer != nil {
		return p.onTimer(ctx, p, t, info)
	}
	return nil
}

type planners struct {
	rt  *core.Runtime
	ns  *core.Namespace[*planner]
	mu  sync.Mutex
	ran []ran
}

func openPlanners(t testing.TB, opts core.Options, onTimer func(context.Context, *planner, core.Timer, core.AlarmInfo) error) *planners {
	t.Helper()
	ps := &planners{rt: openRT(t, opts)}
	var err error
	ps.ns, err = core.Register(ps.rt, "planners", func(_ context.Context, st *core.State) (*planner, error) {
		return &planner{st: st, mu: &ps.mu, ran: &ps.ran, onTimer: onTimer}, nil
	})
	require.NoError(t, err)
	return ps
}

func (ps *planners) do(t testing.TB, fn func(ctx context.Context, p *planner) error) {
	t.Helper()
	require.NoError(t, core.Do(context.Background(), mustGet(t, ps.ns, "p"), func(ctx context.Context, p *planner) error { return fn(ctx, p) }))
}

func (ps *planners) runs(key string) []ran {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []ran
	for _, r := range ps.ran {
		if key == "" || r.key == key {
			out = append(out, r)
		}
	}
	return out
}

// S-A1, S-F5: many timers over the one alarm: one-shot entries fire at
// their times in order, beside the object's own alarm; they can be listed
// and cancelled.
func TestSchedule_OneShot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := openPlanners(t, core.Options{}, nil)
		t0 := time.Now()
		ps.do(t, func(ctx context.Context, p *planner) error {
			return errors.Join(
				p.st.ScheduleAt(ctx, "b", t0.Add(20*time.Second), "mail", []byte("to:b")),
				p.st.ScheduleAfter(ctx, "a", 10*time.Second, "mail", nil),
				p.st.ScheduleAfter(ctx, "gone", 15*time.Second, "mail", nil),
				p.st.SetAlarm(ctx, t0.Add(15*time.Second)),
			)
		})
		ps.do(t, func(ctx context.Context, p *planner) error {
			list, err := p.st.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, list, 3)
			require.Equal(t, []string{"a", "gone", "b"}, []string{list[0].Key, list[1].Key, list[2].Key})
			require.Equal(t, "to:b", string(list[2].Payload))
			ok, err := p.st.CancelSchedule(ctx, "gone")
			require.True(t, ok)
			return err
		})
		require.EqualValues(t, 1, ps.rt.Stats().Alarms, "one real alarm per object")
		time.Sleep(time.Minute)
		synctest.Wait()
		got := ps.runs("")
		require.Len(t, got, 3)
		require.Equal(t, ran{"a", t0.Add(10 * time.Second), 0}, got[0])
		require.Equal(t, ran{"<alarm>", t0.Add(15 * time.Second), 0}, got[1])
		require.Equal(t, ran{"b", t0.Add(20 * time.Second), 0}, got[2])
		ps.do(t, func(ctx context.Context, p *planner) error {
			list, err := p.st.Schedules(ctx)
			require.Empty(t, list)
			return err
		})
		require.EqualValues(t, 0, ps.rt.Stats().Alarms)
	})
}

// S-A17: an alarm does not keep an object in memory, nor does a pending
// schedule entry, one-shot or recurring: the object is evicted when idle
// and woken by each one when it is due. A turn waiting on a timer (State.
// Sleep, the interval timer of the original) does keep it resident.
func TestSchedule_TimersDoNotPin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := openPlanners(t, core.Options{IdleTimeout: 10 * time.Second}, nil)
		t0 := time.Now()
		ps.do(t, func(ctx context.Context, p *planner) error {
			return errors.Join(
				p.st.SetAlarm(ctx, t0.Add(time.Minute)),
				p.st.ScheduleAfter(ctx, "once", 2*time.Minute, "mail", nil),
				p.st.ScheduleCron(ctx, "tick", "*/5 * * * *", "tick", nil, core.MissedSkip),
			)
		})
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.Zero(t, ps.rt.Stats().Resident, "evicted with an alarm and two schedule entries pending")
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		var keys []string
		for _, r := range ps.runs("") {
			keys = append(keys, r.key)
		}
		require.Equal(t, []string{"<alarm>", "once", "tick"}, keys, "each woke the object when due")
		require.Zero(t, ps.rt.Stats().Resident, "and it was evicted again after each")
		require.EqualValues(t, 4, ps.rt.Stats().Constructs, "the first call, then one activation per timer")

		done := make(chan error, 1)
		go func() {
			done <- core.Do(context.Background(), mustGet(t, ps.ns, "p"), func(ctx context.Context, p *planner) error {
				return p.st.Sleep(ctx, time.Minute)
			})
		}()
		time.Sleep(50 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 1, ps.rt.Stats().Resident, "a turn waiting on a timer keeps the object")
		require.NoError(t, <-done)
	})
}

// A recurring entry fires at each tick; one whose run outlasts its period
// is never run twice at once, and the ticks it overlapped fold into one.
func TestSchedule_CronNeverOverlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		running, most := 0, 0
		ps := openPlanners(t, core.Options{}, func(ctx context.Context, p *planner, tm core.Timer, _ core.AlarmInfo) error {
			running++
			most = max(most, running)
			defer func() { running-- }()
			if tm.Key == "slow" {
				return p.st.Sleep(ctx, 25*time.Second) // longer than its period
			}
			return nil
		})
		t0 := time.Now()
		ps.do(t, func(ctx context.Context, p *planner) error {
			return errors.Join(
				p.st.ScheduleCron(ctx, "fast", "@every 10s", "", nil, core.MissedFireOnce),
				p.st.ScheduleCron(ctx, "slow", "@every 10s", "", nil, core.MissedFireOnce),
			)
		})
		time.Sleep(65 * time.Second)
		synctest.Wait()
		require.Equal(t, 1, most, "runs never overlap")
		ticks := ps.runs("fast")
		require.GreaterOrEqual(t, len(ticks), 2, "an object's timers share its one run at a time (S-A9): fast waits while slow runs")
		require.Equal(t, t0.Add(10*time.Second), ticks[0].at)
		slow := ps.runs("slow")
		// Each run takes 25 s: the two ticks it overlaps fold into one run
		// right after it (MissedFireOnce), never two runs at once.
		require.Equal(t, []ran{{"slow", t0.Add(10 * time.Second), 0}, {"slow", t0.Add(35 * time.Second), 0}, {"slow", t0.Add(60 * time.Second), 0}}, slow)
	})
}

// S-A5 per entry, S-F5: a failing entry runs 7 times and is dead-lettered
// under its key, while its sibling and the object's alarm fire on time.
func TestSchedule_EachEntryHasItsOwnRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := noJitter
		var dropped []core.DeadLetter
		opts.OnAlarmDropped = func(dl core.DeadLetter) { dropped = append(dropped, dl) }
		ps := openPlanners(t, opts, func(_ context.Context, _ *planner, tm core.Timer, _ core.AlarmInfo) error {
			if tm.Key == "bad" {
				return errors.New("bad entry")
			}
			return nil
		})
		t0 := time.Now()
		ps.do(t, func(ctx context.Context, p *planner) error {
			return errors.Join(
				p.st.ScheduleAt(ctx, "bad", t0.Add(time.Second), "job", []byte("x")),
				p.st.ScheduleAt(ctx, "good", t0.Add(4*time.Second), "job", nil),
				p.st.SetAlarm(ctx, t0.Add(5*time.Second)),
			)
		})
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		bad := ps.runs("bad")
		require.Len(t, bad, 7)
		for i, want := range []time.Duration{1, 3, 7, 15, 31, 63, 127} {
			require.Equal(t, want*time.Second, bad[i].at.Sub(t0), "bad run %d", i)
			require.Equal(t, i, bad[i].retry)
		}
		require.Equal(t, []ran{{"good", t0.Add(4 * time.Second), 0}}, ps.runs("good"))
		require.Equal(t, []ran{{"<alarm>", t0.Add(5 * time.Second), 0}}, ps.runs("<alarm>"))
		require.Len(t, dropped, 1)
		require.Equal(t, "bad", dropped[0].Key)
		require.Equal(t, "job", dropped[0].Kind)
		require.Equal(t, "x", string(dropped[0].Payload))
		require.NoError(t, ps.rt.Admin().Rearm(context.Background(), dropped[0].Seq, time.Now().Add(time.Second)))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Len(t, ps.runs("bad"), 8, "re-armed entry ran again")
	})
}

// Missed ticks while the runtime was down: MissedFireOnce runs once at
// start, MissedSkip waits for the next tick; never one run per missed tick.
func TestSchedule_MissedTicksAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var mu sync.Mutex
		var log []ran
		open := func() (*core.Runtime, *core.Namespace[*planner]) {
			rt, err := core.Open(core.Options{Dir: dir})
			require.NoError(t, err)
			ns, err := core.Register(rt, "planners", func(_ context.Context, st *core.State) (*planner, error) {
				return &planner{st: st, mu: &mu, ran: &log}, nil
			})
			require.NoError(t, err)
			return rt, ns
		}
		rt, ns := open()
		t0 := time.Now()
		require.NoError(t, core.Do(context.Background(), mustGet(t, ns, "p"), func(ctx context.Context, p *planner) error {
			return errors.Join(
				p.st.ScheduleCron(ctx, "once", "@every 1m", "", nil, core.MissedFireOnce),
				p.st.ScheduleCron(ctx, "skip", "@every 1m", "", nil, core.MissedSkip),
			)
		}))
		time.Sleep(90 * time.Second) // both ran at t0+1m
		require.NoError(t, rt.Close())
		time.Sleep(time.Hour) // down for an hour: 60 ticks missed
		restart := time.Now()
		rt, _ = open()
		defer rt.Close()
		time.Sleep(90 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		var once, skip []time.Duration
		for _, r := range log {
			switch r.key {
			case "once":
				once = append(once, r.at.Sub(t0))
			case "skip":
				skip = append(skip, r.at.Sub(t0))
			}
		}
		require.Equal(t, []time.Duration{time.Minute, restart.Sub(t0), restart.Sub(t0) + time.Minute}, once)
		require.Equal(t, []time.Duration{time.Minute, restart.Sub(t0) + time.Minute}, skip)
	})
}

// Bad input to the schedule gets clear errors.
func TestSchedule_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := openPlanners(t, core.Options{}, nil)
		err := core.Do(context.Background(), mustGet(t, ps.ns, "p"), func(ctx context.Context, p *planner) error {
			require.ErrorContains(t, p.st.ScheduleAfter(ctx, "", time.Second, "", nil), "empty key")
			require.ErrorContains(t, p.st.ScheduleCron(ctx, "c", "every day at noon", "", nil, core.MissedSkip), "cron spec")
			require.ErrorContains(t, p.st.ScheduleAt(ctx, "z", time.Time{}, "", nil), "out of range")
			ok, err := p.st.CancelSchedule(ctx, "never-set")
			require.False(t, ok)
			return err
		})
		require.NoError(t, err)
		plain, err := core.Register(ps.rt, "plain", newItem)
		require.NoError(t, err)
		err = core.Do(context.Background(), get(t, plain, "x"), func(ctx context.Context, it *item) error {
			return it.st.ScheduleAfter(ctx, "k", time.Second, "", nil)
		})
		require.ErrorContains(t, err, "do not implement core.TimerHandler")
	})
}
