package core_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-F6: a facet's alarm run is as exact as a root's under SIGKILL: its writes
// and the end of its timer are decided in one commit, so a kill at any
// moment neither loses a run nor commits it twice (F3, A5).
//
// TestFacetAlarm_ExactUnderSIGKILL runs the test binary again as a child
// (TestFacetAlarm_SIGKILLChild) and SIGKILLs it while facet alarms run, over
// and over. Each facet's alarm is a chain: run k inserts the row k in the
// facet's own database and sets the alarm for run k+1 (due at once). After
// the kills the parent reopens the directory in-process, lets every chain
// finish, and counts each run's rows: 0 is a lost run, 2 a run committed
// twice. DURABLE_TEST_FACET_KILLS="rounds,kills" sets the length (the long
// form is "20,5").
//
// No wait here ends at a fixed time, which a loaded machine outlasts: the
// child says when every chain has ended, and the parent waits as long as
// runs go on, so that only chains that stop (a lost alarm) end a wait,
// after facetStall without a run.

const (
	facetCrashDirEnv = "DURABLE_TEST_FACET_DIR"
	facetKillsEnv    = "DURABLE_TEST_FACET_KILLS"
	facetCrashRoots  = 10  // facets (each under a root of its own) per round
	facetCrashRuns   = 100 // runs of each facet's alarm chain
	facetRanLine     = "ran"
	facetEndedLine   = "ended" // the child found every chain's last run committed
	// facetStall is how long the chains may go without a run before a wait
	// for them ends: far longer than a run, or a failed run's first retries
	// (2 s, then 4 s), take on a loaded machine.
	facetStall = 3 * hangGuard
)

// facetRunBase is the time run k's alarm is set for, plus k ms: long past,
// so every alarm is due at once, and AlarmInfo.Scheduled names the run.
var facetRunBase = time.Unix(1_000_000_000, 0)

type chainRoot struct{ st *core.State }

type chainFacet struct {
	st   *core.State
	ran  func(facet string, k int) // told after each run's writes
	last int                       // the chain's length
}

func (f *chainFacet) Alarm(ctx context.Context, info core.AlarmInfo) error {
	k := int(info.Scheduled.Sub(facetRunBase) / time.Millisecond)
	if _, err := f.st.Storage().Exec(ctx, "INSERT INTO runs(k) VALUES (?)", k); err != nil {
		return err
	}
	if k+1 < f.last {
		if err := f.st.SetAlarm(ctx, facetRunBase.Add(time.Duration(k+1)*time.Millisecond)); err != nil {
			return err
		}
	}
	f.ran(f.st.Name(), k)
	return nil
}

type chainNS struct {
	roots  *core.Namespace[*chainRoot]
	facets *core.FacetKind[*chainFacet]
}

func registerChains(t *testing.T, rt *core.Runtime, ran func(facet string, k int)) *chainNS {
	var n chainNS
	var err error
	n.roots, err = core.Register(rt, "roots", func(_ context.Context, st *core.State) (*chainRoot, error) { return &chainRoot{st: st}, nil })
	require.NoError(t, err)
	n.facets, err = core.RegisterFacet(rt, n.roots, "f", func(ctx context.Context, st *core.State) (*chainFacet, error) {
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS runs(k INTEGER NOT NULL)")
		return &chainFacet{st: st, ran: ran, last: facetCrashRuns}, err
	})
	require.NoError(t, err)
	return &n
}

func (n *chainNS) facet(ctx context.Context, i int) (*core.Stub[*chainFacet], error) {
	r, err := n.roots.Get(fmt.Sprint("r-", i))
	if err != nil {
		return nil, err
	}
	return core.Call(ctx, r, func(ctx context.Context, o *chainRoot) (*core.Stub[*chainFacet], error) {
		return n.facets.Get(o.st, fmt.Sprint("f-", i))
	})
}

// TestFacetAlarm_SIGKILLChild is the child: on a new directory it starts
// every chain, with its clock before the first run is due, and exits; on
// an old one the runtime goes on with the chains due, and the child says
// when every chain's last run is committed.
func TestFacetAlarm_SIGKILLChild(t *testing.T) {
	if !isChild(t) {
		return // runs only as the child of TestFacetAlarm_ExactUnderSIGKILL
	}
	dir := os.Getenv(facetCrashDirEnv)
	_, err := os.Stat(filepath.Join(dir, "started"))
	fresh := os.IsNotExist(err)
	opts := core.Options{Dir: dir, Synchronous: "NORMAL"}
	if fresh {
		opts.Now = func() time.Time { return facetRunBase.Add(-time.Hour) }
	}
	rt, err := core.Open(opts)
	require.NoError(t, err)
	n := registerChains(t, rt, func(string, int) { fmt.Println(facetRanLine) })
	if fresh {
		for i := range facetCrashRoots {
			f, err := n.facet(context.Background(), i)
			require.NoError(t, err)
			require.NoError(t, core.Do(context.Background(), f, func(ctx context.Context, o *chainFacet) error {
				return o.st.SetAlarm(ctx, facetRunBase)
			}))
		}
		require.NoError(t, rt.Close())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "started"), nil, 0o644))
		fmt.Println(readyLine)
		return
	}
	fmt.Println(readyLine)
	for i := 0; i < facetCrashRoots; {
		ended, err := chainEnded(context.Background(), n, i)
		require.NoError(t, err)
		if ended {
			i++
			continue
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println(facetEndedLine)
	require.NoError(t, rt.Close())
}

// chainEnded reports whether facet i's last run is committed.
func chainEnded(ctx context.Context, n *chainNS, i int) (bool, error) {
	f, err := n.facet(ctx, i)
	if err != nil {
		return false, err
	}
	return core.Call(ctx, f, func(ctx context.Context, o *chainFacet) (bool, error) {
		var c int
		err := o.st.Storage().QueryRow(ctx, "SELECT count(*) FROM runs WHERE k = ?", facetCrashRuns-1).Scan(&c)
		return c > 0, err
	})
}

func TestFacetAlarm_ExactUnderSIGKILL(t *testing.T) {
	rounds, kills := 2, 4
	if s := os.Getenv(facetKillsEnv); s != "" {
		r, k, ok := strings.Cut(s, ",")
		var err1, err2 error
		rounds, err1 = strconv.Atoi(r)
		kills, err2 = strconv.Atoi(k)
		require.True(t, ok && err1 == nil && err2 == nil, "%s=%q: want rounds,kills", facetKillsEnv, s)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var lost, twice, runs, killed int
	for round := range rounds {
		dir := t.TempDir()
		killFacetChild(t, dir, 0, 0) // starts the chains
		seen := 0                    // runs the children reported
		for range kills {
			// Kill after a random number of runs still to come.
			left := facetCrashRoots*facetCrashRuns - seen
			if left < 2 {
				break
			}
			at := 1 + rng.IntN(left/2)
			seen += killFacetChild(t, dir, at, time.Duration(rng.IntN(2000))*time.Microsecond)
			killed++
		}
		l, tw, n := finishChains(t, dir)
		t.Logf("round %d: %d runs, %d lost, %d committed twice", round, n, l, tw)
		lost, twice, runs = lost+l, twice+tw, runs+n
	}
	t.Logf("%d rounds, %d kills: %d runs, %d lost, %d committed twice", rounds, killed, runs, lost, twice)
	if lost != 0 || twice != 0 {
		t.Errorf("facet alarm runs under SIGKILL: got %d lost and %d committed twice, want 0 and 0", lost, twice)
	}
}

// killFacetChild starts the child on dir and SIGKILLs it once it has
// reported at runs, and delay more (at 0, or once the chains have ended:
// lets it exit); it returns the runs it reported. A child that says
// nothing for facetStall is killed too: its chains stopped, which
// finishChains counts.
func killFacetChild(t *testing.T, dir string, at int, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFacetAlarm_SIGKILLChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"=TestFacetAlarm_SIGKILLChild", facetCrashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var once sync.Once
	kill := func() { once.Do(func() { cmd.Process.Kill() }) }
	defer func() { kill(); cmd.Wait() }()
	guard := time.AfterFunc(facetStall, kill)
	defer guard.Stop()
	lines := bufio.NewScanner(out)
	ran, after, ready := 0, 0, false
	var log []string
	for lines.Scan() {
		guard.Reset(facetStall)
		switch line := strings.TrimSpace(lines.Text()); line {
		case readyLine: // every chain is started
			ready = true
		case facetEndedLine: // the child closes its runtime and exits
		case facetRanLine:
			ran++
			if !ready {
				continue
			}
			if after++; after == at {
				time.AfterFunc(delay, kill) // SIGKILL: no Close, no flush
			}
		default:
			log = append(log, line)
		}
	}
	require.True(t, ready, "the child never started; its output:\n%s", tail(strings.Join(log, "\n"), 3000))
	return ran
}

// finishChains reopens dir in-process, waits for every chain to reach its
// last run, for as long as runs go on (a chain broken by a lost alarm
// never does), and counts the runs lost and committed twice.
func finishChains(t *testing.T, dir string) (lost, twice, runs int) {
	t.Helper()
	ctx := context.Background()
	rt, err := core.Open(core.Options{Dir: dir, Synchronous: "NORMAL"})
	require.NoError(t, err)
	defer rt.Close()
	ran := make(chan struct{}, 1) // a run's handler returned here
	n := registerChains(t, rt, func(string, int) {
		select {
		case ran <- struct{}{}:
		default:
		}
	})
	counts := func(i int) map[int]int {
		f, err := n.facet(ctx, i)
		require.NoError(t, err)
		got, err := core.Call(ctx, f, func(ctx context.Context, o *chainFacet) (map[int]int, error) {
			m := map[int]int{}
			rows, err := o.st.Storage().Query(ctx, "SELECT k, count(*) FROM runs GROUP BY k")
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			for rows.Next() {
				var k, c int
				if err := rows.Scan(&k, &c); err != nil {
					return nil, err
				}
				m[k] = c
			}
			return m, rows.Err()
		})
		require.NoError(t, err)
		return got
	}
	// Wait while the chains run: each wait ends when a run returns, and
	// the whole ends once every chain's last run is committed, or once no
	// run has come for facetStall (the chains left stopped).
	stalled := time.NewTimer(facetStall)
	defer stalled.Stop()
	for i := 0; i < facetCrashRoots; {
		ended, err := chainEnded(ctx, n, i)
		require.NoError(t, err)
		if ended {
			i++
			continue
		}
		select {
		case <-ran:
			stalled.Reset(facetStall)
		case <-stalled.C:
			t.Logf("no run for %v: chain f-%d and those after it are counted as they stand", facetStall, i)
			i = facetCrashRoots
		}
	}
	for i := range facetCrashRoots {
		c := counts(i)
		var bad []string
		for k := range facetCrashRuns {
			switch {
			case c[k] == 0:
				lost++
			case c[k] > 1:
				twice += c[k] - 1
			}
			if c[k] != 1 {
				bad = append(bad, fmt.Sprintf("%d:%d", k, c[k]))
			}
			runs += c[k]
		}
		if len(bad) > 0 {
			t.Logf("chain f-%d: %d runs committed other than once (run:times): %s", i, len(bad), strings.Join(bad[:min(len(bad), 10)], " "))
		}
	}
	return lost, twice, runs
}

// onceFacet's alarm inserts a row, sets its alarm an hour on and calls
// during (inside the run, before its writes commit).
type onceFacet struct {
	st     *core.State
	during func()
}

func (f *onceFacet) Alarm(ctx context.Context, info core.AlarmInfo) error {
	if _, err := f.st.Storage().Exec(ctx, "INSERT INTO runs(k) VALUES (?)", info.Scheduled.UnixNano()); err != nil {
		return err
	}
	if err := f.st.SetAlarm(ctx, info.Scheduled.Add(time.Hour)); err != nil {
		return err
	}
	f.during()
	return nil
}

// S-F6: the crash that the SIGKILL test hits only now and then, made
// exact. The data directory is copied while a facet's alarm runs (its
// root has marked the timer running; the run's writes are not committed),
// the run ends, and the facet's files, which hold the run's commit, are
// copied over that copy: the directory a crash between the facet's commit
// and its root's leaves. Opened again, the run is not run twice, and the
// alarm the run set stands.
//
// The reopened runtime's clock stands before the time the marked timer is
// due, so that only TriggerAlarm delivers it: were the scheduler to deliver
// it first, TriggerAlarm would then run the alarm the run set, a new run.
func TestFacetAlarm_CommittedRunIsNotRunAgain(t *testing.T) {
	start := time.Now()
	crashed, alarm := onceCrash(t)
	rt, roots, facets := onceOpen(t, core.Options{Dir: crashed, Now: func() time.Time { return start }}, func() {})
	defer rt.Close()
	f := onceStub(t, roots, facets)
	had, err := f.TriggerAlarm(context.Background())
	require.NoError(t, err)
	require.True(t, had, "the root's timer, marked running, is there after the crash")
	onceCheck(t, f, alarm)
}

// S-F6: the delivery of the run a crash left marked fails before it gets
// to the facet's record (the facet's kind is not registered yet when the
// scheduler finds the timer due at Open; the root's constructor fails). The
// retry it leaves keeps the run's token, so the run that committed before
// the crash is still not run again.
func TestFacetAlarm_CommittedRunIsNotRunAgainAfterAFailedDelivery(t *testing.T) {
	for _, c := range []struct {
		name, event string
		rootFails   bool
	}{
		{"facet kind registered late", "event=alarm_retry", false},
		{"root constructor fails", "event=alarm_constructor_failed", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			crashed, alarm := onceCrash(t)
			// The clock stands still past the marked timer's time: the scheduler
			// delivers it once at Open, and its retry never comes due.
			now := time.Now()
			logs := newLogCapture()
			rt, err := core.Open(core.Options{Dir: crashed, Now: func() time.Time { return now }, Logger: slog.New(logs)})
			require.NoError(t, err)
			defer rt.Close()
			var rootFails atomic.Bool
			rootFails.Store(c.rootFails)
			roots, err := core.Register(rt, "roots", func(_ context.Context, st *core.State) (*chainRoot, error) {
				if rootFails.Load() {
					return nil, errors.New("the root does not start")
				}
				return &chainRoot{st: st}, nil
			})
			require.NoError(t, err)
			register := func() *core.FacetKind[*onceFacet] {
				facets, err := core.RegisterFacet(rt, roots, "f", onceNew(func() {}))
				require.NoError(t, err)
				return facets
			}
			var facets *core.FacetKind[*onceFacet]
			if c.rootFails {
				facets = register()
			}
			// The scheduler delivers it at once; the wait is only a bound on a hang.
			_, ok := logs.waitFor(c.event, 2*time.Minute)
			require.True(t, ok, "the scheduler's delivery at Open fails with %s", c.event)
			if !c.rootFails {
				facets = register()
			}
			rootFails.Store(false)
			f := onceStub(t, roots, facets)
			had, err := f.TriggerAlarm(context.Background())
			require.NoError(t, err)
			require.True(t, had, "the retry of the marked timer is there")
			onceCheck(t, f, alarm)
		})
	}
}

// onceCrash makes the directory of a crash between a facet's alarm run's
// commit and its root's (see TestFacetAlarm_CommittedRunIsNotRunAgain), and
// returns it with the alarm the run set.
func onceCrash(t *testing.T) (crashed string, alarm time.Time) {
	ctx := context.Background()
	live := t.TempDir()
	crashed = t.TempDir()
	var once sync.Once
	rt, roots, facets := onceOpen(t, core.Options{Dir: live}, func() { once.Do(func() { copyDir(t, live, crashed) }) })
	f := onceStub(t, roots, facets)
	require.NoError(t, core.Do(ctx, f, func(ctx context.Context, o *onceFacet) error { return o.st.SetAlarm(ctx, time.Now().Add(time.Hour)) }))
	had, err := f.TriggerAlarm(ctx)
	require.NoError(t, err)
	require.True(t, had)
	n, alarm := onceRuns(t, f)
	require.Equal(t, 1, n, "runs in the live directory")
	require.NoError(t, rt.Close())
	// The crash: the root as it was during the run, the facet as it was
	// after (its files only: a log the copy caught and the close removed
	// goes too).
	require.NoError(t, filepath.WalkDir(crashed, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, ".facets") {
			return err
		}
		return os.Remove(path)
	}))
	require.NoError(t, filepath.WalkDir(live, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, ".facets") || strings.HasSuffix(path, "-shm") {
			return err
		}
		rel, _ := filepath.Rel(live, path)
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(crashed, rel), b, 0o644)
		}
		return err
	}))
	return crashed, alarm
}

func onceNew(during func()) func(context.Context, *core.State) (*onceFacet, error) {
	return func(ctx context.Context, st *core.State) (*onceFacet, error) {
		_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS runs(k INTEGER NOT NULL)")
		return &onceFacet{st: st, during: during}, err
	}
}

func onceOpen(t *testing.T, opts core.Options, during func()) (*core.Runtime, *core.Namespace[*chainRoot], *core.FacetKind[*onceFacet]) {
	rt, err := core.Open(opts)
	require.NoError(t, err)
	roots, err := core.Register(rt, "roots", func(_ context.Context, st *core.State) (*chainRoot, error) { return &chainRoot{st: st}, nil })
	require.NoError(t, err)
	facets, err := core.RegisterFacet(rt, roots, "f", onceNew(during))
	require.NoError(t, err)
	return rt, roots, facets
}

func onceStub(t *testing.T, roots *core.Namespace[*chainRoot], facets *core.FacetKind[*onceFacet]) *core.Stub[*onceFacet] {
	r, err := roots.Get("r")
	require.NoError(t, err)
	f, err := core.Call(context.Background(), r, func(_ context.Context, o *chainRoot) (*core.Stub[*onceFacet], error) { return facets.Get(o.st, "f") })
	require.NoError(t, err)
	return f
}

// onceRuns returns the runs the facet's table holds and its alarm.
func onceRuns(t *testing.T, f *core.Stub[*onceFacet]) (n int, alarm time.Time) {
	require.NoError(t, core.Do(context.Background(), f, func(ctx context.Context, o *onceFacet) error {
		if err := o.st.Storage().QueryRow(ctx, "SELECT count(*) FROM runs").Scan(&n); err != nil {
			return err
		}
		var err error
		alarm, _, err = o.st.GetAlarm(ctx)
		return err
	}))
	return n, alarm
}

// onceCheck checks that after the crash the run is there once, and the
// alarm it set stands.
func onceCheck(t *testing.T, f *core.Stub[*onceFacet], alarm time.Time) {
	t.Helper()
	got, gotAlarm := onceRuns(t, f)
	if got != 1 {
		t.Errorf("runs after the crash: got %d, want 1 (the run committed before the crash)", got)
	}
	if !gotAlarm.Equal(alarm) {
		t.Errorf("alarm after the crash: got %v, want %v (the one the run set)", gotAlarm, alarm)
	}
}
