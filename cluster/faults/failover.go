package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The failover scenarios, each a way to lose one node (or all) while writers keep writing.
const (
	ScenarioNoLeader = "a"     // SIGKILL an owner that leads no raft group (its leaderships handed over first)
	ScenarioLeader   = "b"     // SIGKILL a node that leads raft groups, owning as few objects as there are
	ScenarioMetaOnly = "bmeta" // SIGKILL the JetStream meta leader, moved first to a node owning as few objects as there are
	ScenarioBoth     = "c"     // SIGKILL an owner that leads raft groups
	ScenarioMeta     = "cmeta" // SIGKILL the JetStream meta leader
	ScenarioReplaced = "d"     // SIGKILL an owner, delete its directory, start it again under its name
	ScenarioAll      = "e"     // SIGKILL every node, start them all again
	ScenarioDrain    = "f"     // SIGTERM an owner that leads raft groups (it drains), start it again
)

// Scenarios are every scenario, in the order they run.
var Scenarios = []string{ScenarioNoLeader, ScenarioLeader, ScenarioMetaOnly, ScenarioBoth, ScenarioMeta, ScenarioReplaced, ScenarioAll, ScenarioDrain}

// FailoverConfig configures RunFailover.
type FailoverConfig struct {
	Nodes     int           // node processes (default 3)
	Shards    int           // streams of the log (default 16)
	Objects   int           // objects written, each by one writer (default 12)
	Kills     int           // kills per scenario (default 10)
	Scenarios []string      // which, in order (default Scenarios)
	Budget    time.Duration // a call not acknowledged within it fails (default 10 s)
	Cap       time.Duration // how long an object is waited for after a kill (default 60 s)
	Logf      func(format string, args ...any)
	// Trace, if above 0, prints after each kill the attempts since the kill of every object that
	// took longer than it to be served again: node, start and end (from the kill), and outcome.
	Trace time.Duration
}

// Sample is one object's time to serve again after one kill.
type Sample struct {
	Scenario string
	Class    string // owner, group, both, other (see Row); all for scenario e
	Kill     int    // the kill's number within its scenario
	Key      string
	Victim   string        // the node killed
	Took     time.Duration // from the kill to the object's first acknowledged write after it
	Served   bool          // false: no acknowledged write within the cap (Took is the cap)
	Election time.Duration // from the kill until every raft group the victim led had a new leader
}

// FailoverReport is what RunFailover measured.
type FailoverReport struct {
	Samples   []Sample
	Calls     map[string]int // write calls made during each scenario
	Failed    map[string]int // calls of each scenario not acknowledged within the budget
	Unknown   map[string]int // attempts of each scenario whose outcome was unknown (sent again)
	Anomalies []string       // broken promises the writers found: lost or phantom writes
}

// failover is a run of RunFailover: the node processes, the writers and what they saw.
type failover struct {
	*Cluster
	t       testing.TB
	cfg     FailoverConfig
	keys    []string
	rep     *FailoverReport
	current string // the scenario running, for the counters

	mu   sync.Mutex
	acks map[string][]callResult // key -> its acknowledged calls (not those acknowledged late)
	last map[string]callResult   // key -> its last acknowledged call
	tr   map[string][]attempt    // key -> its attempts since the last kill (with Trace)
	t0   time.Time               // the last kill (with Trace)
}

// RunFailover starts cfg.Nodes node processes of the runtime target, writes cfg.Objects objects
// continuously (one writer each, through a router that follows refusals to the owner they name),
// and for each scenario loses a node cfg.Kills times, each time measuring, per object, the time
// from the loss to the object's first acknowledged write after it. Between kills the lost node is
// started again and every node must be ready before the next. Every node process is killed and
// reaped when the test ends, however it ends.
func RunFailover(t testing.TB, cfg FailoverConfig) *FailoverReport {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	if cfg.Objects == 0 {
		cfg.Objects = 12
	}
	if cfg.Kills == 0 {
		cfg.Kills = 10
	}
	if cfg.Scenarios == nil {
		cfg.Scenarios = Scenarios
	}
	if cfg.Budget == 0 {
		cfg.Budget = 10 * time.Second
	}
	if cfg.Cap == 0 {
		cfg.Cap = time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	for _, s := range cfg.Scenarios {
		if !slices.Contains(Scenarios, s) {
			t.Fatalf("faults: no failover scenario %q (there are %s)", s, strings.Join(Scenarios, ","))
		}
	}
	f := &failover{Cluster: StartCluster(t, cfg.Nodes, cfg.Shards, cfg.Logf), t: t, cfg: cfg,
		acks: map[string][]callResult{}, last: map[string]callResult{},
		rep: &FailoverReport{Calls: map[string]int{}, Failed: map[string]int{}, Unknown: map[string]int{}}}

	for i := range cfg.Objects {
		f.keys = append(f.keys, fmt.Sprintf("%s/o%d", registerNS, i))
		f.router.guess[f.keys[i]] = i % cfg.Nodes // spread the objects' first owners
	}
	if cfg.Trace > 0 {
		f.tr = map[string][]attempt{}
		f.router.traced = f.traced
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, key := range f.keys {
		w := &writer{r: f.router, key: key, budget: cfg.Budget}
		wg.Go(func() { f.write(ctx, w) })
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	for _, s := range cfg.Scenarios {
		f.mu.Lock()
		f.current = s
		f.mu.Unlock()
		for k := range cfg.Kills {
			f.cycle(s, k)
		}
		f.waitReady(3 * time.Minute)
		f.settle()
		f.mu.Lock()
		table := f.rep.Table()
		f.mu.Unlock()
		f.cfg.Logf("faults: failover: after scenario %s:\n%s", s, table)
	}
	f.mu.Lock()
	f.current = ""
	f.mu.Unlock()
	return f.rep
}

// write is a writer's loop: a call after another, each recorded, until ctx ends.
func (f *failover) write(ctx context.Context, w *writer) {
	for ctx.Err() == nil {
		f.mu.Lock()
		s := f.current // a call counts in the scenario it began in
		f.mu.Unlock()
		res := w.write(ctx)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.rep.Calls[s]++
		f.rep.Unknown[s] += res.stats.unknown
		switch {
		case res.anomaly:
			f.rep.Anomalies = append(f.rep.Anomalies, res.err.Error())
		case !res.ok:
			f.rep.Failed[s]++
		default:
			f.last[w.key] = res
			if !res.late {
				f.acks[w.key] = append(f.acks[w.key], res)
			}
		}
		f.mu.Unlock()
		if res.anomaly {
			f.cfg.Logf("faults: %v", res.err)
		} else if !res.ok {
			f.cfg.Logf("faults: %s: a call failed: %v", w.key, res.err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstAck returns the first acknowledged write of key whose attempt started at or after t.
func (f *failover) firstAck(key string, t time.Time) (callResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	acks := f.acks[key]
	i, _ := slices.BinarySearchFunc(acks, t, func(a callResult, t time.Time) int { return a.start.Compare(t) })
	if i == len(acks) {
		return callResult{}, false
	}
	return acks[i], true
}

// owners returns the node that acknowledged each key's last write.
func (f *failover) owners() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := map[string]string{}
	for k, r := range f.last {
		o[k] = f.names[r.node]
	}
	return o
}

// settle waits until every object has been acknowledged a write that began after settle did:
// the cluster serves every object again.
func (f *failover) settle() {
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for _, key := range f.keys {
		for {
			if _, ok := f.firstAck(key, start); ok {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("faults: %s not served again within 2 minutes of every node being ready", key)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// traced keeps an attempt made since the last kill (the router's hook, with Trace).
func (f *failover) traced(key string, a attempt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.t0.IsZero() && !a.end.Before(f.t0) {
		f.tr[key] = append(f.tr[key], a)
	}
}

// traceFrom starts keeping the attempts that end after t0 (with Trace).
func (f *failover) traceFrom(t0 time.Time) {
	if f.cfg.Trace <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t0 = t0
	clear(f.tr)
}

// printTrace prints the attempts since the kill of each sample slower than Trace.
func (f *failover) printTrace(samples []Sample, t0 time.Time) {
	if f.cfg.Trace <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, smp := range samples {
		if smp.Took <= f.cfg.Trace {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "faults: trace %s kill %d at %s: %s (%s, shard %s) served after %.2fs:", smp.Scenario, smp.Kill, t0.UTC().Format("15:04:05.000"), smp.Key, smp.Class, objectGroups(smp.Key, f.cfg.Shards)[0], smp.Took.Seconds())
		for _, a := range f.tr[smp.Key] {
			if a.start.Sub(t0) > smp.Took {
				break
			}
			out := "ok"
			if a.err != nil {
				out = a.err.Error()
				if len(out) > 160 {
					out = out[:160]
				}
			}
			fmt.Fprintf(&b, "\n\t%+.3fs %+.3fs %s %s", a.start.Sub(t0).Seconds(), a.end.Sub(t0).Seconds(), f.names[a.node], out)
		}
		f.cfg.Logf("%s", b.String())
	}
}
