package core_test

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// Alarm durability across Await: an
// alarm, a facet's alarm and a schedule entry stay durable until their
// run has finished, however many Awaits the handler makes; a SIGKILL at
// any moment means they run again (at least once).
//
// TestAlarm_SurvivesSIGKILLInsideAwait runs the test binary again as a
// child (TestAlarm_SIGKILLChild) per kill moment. The child arms
// crashPerKind timers of each kind, due at once (or, for "before", in an
// hour), and prints "ready" when every handler has reached the moment;
// the parent SIGKILLs it there. The child's way there (starting a test
// binary, opening a runtime, creating 64 databases) takes seconds of CPU
// under -race, and a loaded machine stretches that without bound, so no
// wait for it ends at a fixed time: the child prints a progress line per
// timer armed and per handler at the moment, and the parent gives up only
// once the child has said nothing for crashStall. The child ends when the
// parent closes its stdin. The "random" moment kills at a seeded
// random delay while handlers sleep in two Awaits; its handlers print
// "done <kind> <name>" as they return, since a run that finished in the
// child need not run again. The parent then reopens every directory
// in-process, with handlers that record each run, and requires every
// armed timer to run at least once.

const (
	crashPerKind = 16 // timers of each kind per child (64 alarms may run at once)
	crashDirEnv  = "DURABLE_TEST_ALARM_DIR"
	crashModeEnv = "DURABLE_TEST_ALARM_MODE"
	killSeedEnv  = "DURABLE_TEST_SEED" // replays the random kill moment

	kindPlain = "plain" // an object's own alarm
	kindFacet = "facet" // a facet's alarm (RegisterFacet)
	kindSched = "sched" // a schedule entry (ScheduleAt, OnTimer)
	armedLine = "armed" // the child armed everything
	readyLine = "ready" // every handler is at the kill moment
	doneWord  = "done"  // "done <kind> <name>": a handler returned in the child
	stepWord  = "step"  // "step ...": the child armed a timer, or a handler reached the moment

	// crashStall is how long a child may go without a line of output before it is counted as hung,
	// and the reopened runtimes without a timer's first run before the timers not run yet are
	// counted as lost.
	crashStall = 3 * hangGuard
)

var crashKinds = []string{kindPlain, kindFacet, kindSched}

// crashHandler is what a timer handler does: in the child, it goes to the
// kill moment; in the parent, it records the run.
type crashHandler func(ctx context.Context, st *core.State, kind string) error

type crashPlain struct {
	st  *core.State
	run crashHandler
}

func (o *crashPlain) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	return o.run(ctx, o.st, kindPlain)
}

// crashRoot hosts one facet. It implements Alarmer only so that its own
// (never set) alarm would have a handler.
type crashRoot struct{ st *core.State }

func (*crashRoot) Alarm(context.Context, core.AlarmInfo) error { return nil }

type crashFacet struct {
	st  *core.State
	run crashHandler
}

func (o *crashFacet) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	return o.run(ctx, o.st, kindFacet)
}

type crashSched struct {
	st  *core.State
	run crashHandler
}

func (o *crashSched) OnTimer(ctx context.Context, _ core.Timer, _ core.AlarmInfo) error {
	return o.run(ctx, o.st, kindSched)
}

// crashNS is the three kinds of objects, registered the same way in the
// child and in the parent.
type crashNS struct {
	plain  *core.Namespace[*crashPlain]
	roots  *core.Namespace[*crashRoot]
	facets *core.FacetKind[*crashFacet]
	sched  *core.Namespace[*crashSched]
}

func registerCrash(rt *core.Runtime, run crashHandler) (*crashNS, error) {
	var n crashNS
	var err error
	if n.plain, err = core.Register(rt, "plain", func(_ context.Context, st *core.State) (*crashPlain, error) {
		return &crashPlain{st: st, run: run}, nil
	}); err != nil {
		return nil, err
	}
	if n.roots, err = core.Register(rt, "roots", func(_ context.Context, st *core.State) (*crashRoot, error) {
		return &crashRoot{st: st}, nil
	}); err != nil {
		return nil, err
	}
	if n.facets, err = core.RegisterFacet(rt, n.roots, "f", func(_ context.Context, st *core.State) (*crashFacet, error) {
		return &crashFacet{st: st, run: run}, nil
	}); err != nil {
		return nil, err
	}
	if n.sched, err = core.Register(rt, "sched", func(_ context.Context, st *core.State) (*crashSched, error) {
		return &crashSched{st: st, run: run}, nil
	}); err != nil {
		return nil, err
	}
	return &n, nil
}

// crashName is the name of timer i of a kind: the object's own name, and
// for a facet the facet's name (its root is "r-<i>").
func crashName(kind string, i int) string {
	switch kind {
	case kindPlain:
		return fmt.Sprint("a-", i)
	case kindFacet:
		return fmt.Sprint("f-", i)
	}
	return fmt.Sprint("s-", i)
}

// arm sets timer i of every kind, due at at(now).
func (n *crashNS) arm(ctx context.Context, i int, at func(now time.Time) time.Time) error {
	p, err := n.plain.Get(crashName(kindPlain, i))
	if err != nil {
		return err
	}
	if err := core.Do(ctx, p, func(ctx context.Context, o *crashPlain) error {
		return o.st.SetAlarm(ctx, at(o.st.Now()))
	}); err != nil {
		return err
	}
	r, err := n.roots.Get(fmt.Sprint("r-", i))
	if err != nil {
		return err
	}
	f, err := core.Call(ctx, r, func(ctx context.Context, o *crashRoot) (*core.Stub[*crashFacet], error) {
		return n.facets.Get(o.st, crashName(kindFacet, i))
	})
	if err != nil {
		return err
	}
	if err := core.Do(ctx, f, func(ctx context.Context, o *crashFacet) error {
		return o.st.SetAlarm(ctx, at(o.st.Now()))
	}); err != nil {
		return err
	}
	s, err := n.sched.Get(crashName(kindSched, i))
	if err != nil {
		return err
	}
	return core.Do(ctx, s, func(ctx context.Context, o *crashSched) error {
		return o.st.ScheduleAt(ctx, "entry", at(o.st.Now()), "crash", nil)
	})
}

// crashMoment is one kill moment.
type crashMoment struct {
	name string
	// handler is the child's handler; signal says it reached the moment.
	handler func(seed uint64, signal func()) crashHandler
	later   bool // the timers are armed for later, not due at once
}

// block holds a handler at the kill moment; the child is killed there. It
// has no time limit: on a loaded machine the other handlers may take long to
// get there, and a handler that returned would leave nothing to run again.
// The child ends when its parent goes (TestAlarm_SIGKILLChild).
func block(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

var crashMoments = []crashMoment{
	{name: "before-runs", later: true, handler: func(uint64, func()) crashHandler {
		return func(context.Context, *core.State, string) error { return nil }
	}},
	{name: "first-segment", handler: func(_ uint64, signal func()) crashHandler {
		return func(ctx context.Context, _ *core.State, _ string) error {
			signal()
			return block(ctx)
		}
	}},
	{name: "inside-await", handler: func(_ uint64, signal func()) crashHandler {
		return func(ctx context.Context, st *core.State, _ string) error {
			return st.Await(ctx, func(actx context.Context) error {
				signal()
				return block(actx)
			})
		}
	}},
	{name: "after-await", handler: func(_ uint64, signal func()) crashHandler {
		return func(ctx context.Context, st *core.State, _ string) error {
			if err := st.Await(ctx, func(context.Context) error { return nil }); err != nil {
				return err
			}
			signal()
			return block(ctx)
		}
	}},
	{name: "random", handler: func(seed uint64, _ func()) crashHandler {
		return func(ctx context.Context, st *core.State, kind string) error {
			h := fnv.New64a()
			h.Write([]byte(kind + "/" + st.Name()))
			rng := rand.New(rand.NewPCG(seed, h.Sum64()))
			for range 2 {
				if err := st.Sleep(ctx, time.Duration(10+rng.IntN(150))*time.Millisecond); err != nil {
					return err
				}
			}
			fmt.Println(doneWord, kind, st.Name())
			return nil
		}
	}},
}

// TestAlarm_SIGKILLChild is the child of TestAlarm_SurvivesSIGKILLInsideAwait.
func TestAlarm_SIGKILLChild(t *testing.T) {
	if !isChild(t) {
		t.Skip("runs only as the child of TestAlarm_SurvivesSIGKILLInsideAwait")
	}
	mode := os.Getenv(crashModeEnv)
	var moment *crashMoment
	for i := range crashMoments {
		if crashMoments[i].name == mode {
			moment = &crashMoments[i]
		}
	}
	require.NotNil(t, moment, "unknown kill moment %q", mode)
	seed, _ := strconv.ParseUint(os.Getenv(killSeedEnv), 10, 64)
	// The parent holds the child's stdin open until it has killed it: if the parent dies first, the
	// child ends here.
	parentGone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	var reached atomic.Int64
	signal := func() {
		n := reached.Add(1)
		fmt.Println(stepWord, "moment", n)
		if n == int64(len(crashKinds)*crashPerKind) {
			fmt.Println(readyLine)
		}
	}
	rt, err := core.Open(core.Options{Dir: os.Getenv(crashDirEnv), Synchronous: "NORMAL"})
	require.NoError(t, err)
	n, err := registerCrash(rt, moment.handler(seed, signal))
	require.NoError(t, err)
	at := func(now time.Time) time.Time { return now }
	if moment.later {
		at = func(now time.Time) time.Time { return now.Add(time.Hour) }
	}
	var wg sync.WaitGroup
	errs := make(chan error, crashPerKind)
	for i := range crashPerKind {
		wg.Go(func() {
			err := n.arm(context.Background(), i, at)
			fmt.Println(stepWord, "armed", i)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	fmt.Println(armedLine)
	if moment.later {
		fmt.Println(readyLine)
	}
	<-parentGone // killed long before, unless the parent died
}

// killRun is one child: its directory and what ran in it.
type killRun struct {
	moment string
	dir    string
	ran    map[string]bool // "kind/name" of handlers that returned in the child
	err    error           // the child could not be brought to its kill moment
}

func TestAlarm_SurvivesSIGKILLInsideAwait(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(killSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("random kill moment: seed %d (replay with %s=%d)", seed, killSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	runs := make([]*killRun, 0, len(crashMoments))
	for _, m := range crashMoments {
		r := &killRun{moment: m.name, dir: t.TempDir(), ran: map[string]bool{}}
		var delay time.Duration
		if m.name == "random" {
			delay = time.Duration(rng.IntN(300)) * time.Millisecond
			t.Logf("random: SIGKILL %v after the child armed its timers", delay)
		}
		r.err = killChild(t, m.name, r, seed, delay)
		if m.name == "random" {
			t.Logf("random: %d of %d handlers had returned in the child", len(r.ran), len(crashKinds)*crashPerKind)
		}
		runs = append(runs, r)
	}

	// Reopen every directory at once, with the clock two hours ahead so
	// that the timers armed "for later" are due too, and wait for every
	// timer to run.
	type reopened struct {
		mu   sync.Mutex
		seen map[string]bool
		all  chan struct{} // closed once every timer has run
	}
	want := len(crashKinds) * crashPerKind
	progress := make(chan struct{}, 1) // a timer ran for the first time
	states := make([]*reopened, len(runs))
	for i, r := range runs {
		s := &reopened{seen: map[string]bool{}, all: make(chan struct{})}
		states[i] = s
		for k := range r.ran {
			s.seen[k] = true
		}
		if len(s.seen) == want {
			close(s.all)
		}
		if r.err != nil {
			continue
		}
		rt := openRuntime(t, core.Options{Dir: r.dir, Synchronous: "NORMAL", Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
		_, err := registerCrash(rt, func(_ context.Context, st *core.State, kind string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if k := kind + "/" + st.Name(); !s.seen[k] {
				s.seen[k] = true
				if len(s.seen) == want {
					close(s.all)
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	// A lost timer never runs: the wait goes on while timers run for the first time, and ends once
	// none has for crashStall, which leaves room for a run that fails and is retried (2 s, then 4 s)
	// on a loaded machine.
	stalled := time.NewTimer(crashStall)
	defer stalled.Stop()
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("kill moment %s: %v", r.moment, r.err)
			continue
		}
	wait:
		for {
			select {
			case <-states[i].all:
				break wait
			case <-progress:
				stalled.Reset(crashStall)
			case <-stalled.C:
				break wait
			}
		}
	}
	for i, r := range runs {
		if r.err != nil {
			continue
		}
		s := states[i]
		s.mu.Lock()
		var lost []string
		total := 0
		for _, kind := range crashKinds {
			n := 0
			for j := range crashPerKind {
				if !s.seen[kind+"/"+crashName(kind, j)] {
					n++
				}
			}
			total += n
			lost = append(lost, fmt.Sprintf("%s %d/%d", kind, n, crashPerKind))
		}
		s.mu.Unlock()
		if total > 0 {
			t.Errorf("SIGKILL at %s: lost timers: got %d, want 0 (lost per kind: %s)",
				r.moment, total, strings.Join(lost, ", "))
		}
	}
}

// killChild runs the child for one kill moment and SIGKILLs it there: at
// "ready", or delay after "armed" for the random moment. It records the
// handlers that returned in the child.
func killChild(t *testing.T, moment string, r *killRun, seed uint64, delay time.Duration) error {
	t.Helper()
	// No time limit for the child: the parent kills a child that says nothing for crashStall, and
	// the child ends if the parent dies (its stdin closes).
	cmd := exec.Command(os.Args[0], "-test.run=^TestAlarm_SIGKILLChild$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), childEnv+"=TestAlarm_SIGKILLChild",
		crashDirEnv+"="+r.dir, crashModeEnv+"="+moment, killSeedEnv+"="+strconv.FormatUint(seed, 10))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe() // held open until the child is killed
	require.NoError(t, err)
	defer stdin.Close()
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	killed := make(chan struct{})
	var once sync.Once
	kill := func() { once.Do(func() { cmd.Process.Kill(); close(killed) }) }
	defer kill()
	var stalled atomic.Bool
	guard := time.AfterFunc(crashStall, func() { stalled.Store(true); kill() }) // a child that stopped on its way to the moment
	defer guard.Stop()

	wantLine := readyLine
	if moment == "random" {
		wantLine = armedLine
	}
	lines := bufio.NewScanner(out)
	reached := false
	var log []string
	for lines.Scan() {
		if !reached {
			guard.Reset(crashStall)
		}
		line := strings.TrimSpace(lines.Text())
		if f := strings.Fields(line); len(f) == 3 && f[0] == doneWord {
			r.ran[f[1]+"/"+f[2]] = true
			continue
		}
		if strings.HasPrefix(line, stepWord+" ") {
			continue
		}
		log = append(log, line)
		if line == wantLine && !reached {
			reached = true
			if delay > 0 {
				time.AfterFunc(delay, kill)
			} else {
				kill() // SIGKILL: no Close, no flush
			}
		}
	}
	kill()
	cmd.Wait()
	if !reached {
		why := "it exited"
		if stalled.Load() {
			why = fmt.Sprintf("it said nothing for %v", crashStall)
		}
		return fmt.Errorf("the child never printed %q: %s; its output:\n%s", wantLine, why, tail(strings.Join(log, "\n"), 3000))
	}
	return nil
}
