package faults

import (
	"fmt"
	"slices"
	"time"
)

// faultEvent is one fault of the schedule: when it began and the nodes it hit.
type faultEvent struct {
	At    time.Time
	Kind  string
	Nodes []string
}

// note records a fault that begins now on the nodes given by index (none: every node).
func (h *harness) note(kind string, nodes ...int) {
	ev := faultEvent{At: time.Now(), Kind: kind}
	if len(nodes) == 0 {
		for _, p := range h.procs {
			ev.Nodes = append(ev.Nodes, p.spec.Name)
		}
	}
	for _, i := range nodes {
		ev.Nodes = append(ev.Nodes, h.procs[i].spec.Name)
	}
	h.events = append(h.events, ev)
}

// AlarmSummary is what the alarm workload found. Lateness is a run's time (by the running node's
// clock) less the time its alarm was set for; every node process runs on this machine, so the
// clocks are one and no margin is allowed for "never before its time". An alarm's owner is the
// node last seen serving its shard before its time (by the shard's pings, or the node that
// acknowledged its arming, if later); the owner is lost if a fault (SIGKILL, SIGSTOP, a cut link,
// a restart) hit it after it was last seen so and before the alarm's first recorded run. The
// alarm's failover is then the time
// from the fault to the first ping of the alarm's shard that began after the fault and was served,
// and its excess the run's time less the later of its due time and the fault's end by that measure.
type AlarmSummary struct {
	Armed     int // beepers armed (an arm acknowledged)
	Unacked   int // beepers whose arm was never acknowledged (not required to run)
	ArmedLate int // arms acknowledged after the alarm's time (left out of the lateness figures)
	Fired     int // armed beepers whose alarm ran (recorded) at least once
	Runs      int // recorded runs in all (a run is at least once)
	Lost      int // armed beepers whose alarm never ran
	Early     int // runs before their alarm's time
	Faults    int // faults in the schedule

	OwnerLost, OwnerKept Latency // lateness, by whether the alarm's owner was lost
	Failover             Latency // the failover of each alarm whose owner was lost
	Excess               Latency // each such alarm's excess over its failover
	Problems             []string
	Slow                 []string // the owner-lost alarms whose excess is over MaxExcessP99, described
	LateKept             []string // the owner-kept alarms that ran over MaxExcessP99 late, described
}

// Latency is a distribution's count, median, 99th percentile and maximum.
type Latency struct {
	N             int
	P50, P99, Max time.Duration
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	return Latency{N: len(ds), P50: percentile(ds, 0.50), P99: percentile(ds, 0.99), Max: slices.Max(ds)}
}

func (l Latency) String() string {
	if l.N == 0 {
		return "n=0"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", l.N, r(l.P50), r(l.P99), r(l.Max))
}

// MaxExcessP99 is the bound on an owner-lost alarm's excess over its failover (SEMANTICS CL9).
const MaxExcessP99 = time.Second

// Sound reports whether alarms were armed and every one ran, none before its time, each for the
// time it was armed for.
func (s *AlarmSummary) Sound() bool {
	return s.Armed > 0 && s.Lost == 0 && s.Early == 0 && len(s.Problems) == 0
}

// OK reports whether the run is Sound and the owner-lost alarms' excess p99 is within
// MaxExcessP99.
func (s *AlarmSummary) OK() bool { return s.Sound() && s.Excess.P99 <= MaxExcessP99 }

// String is the summary line.
func (s *AlarmSummary) String() string {
	return fmt.Sprintf("alarms: armed=%d unacked=%d armed-late=%d fired=%d runs=%d lost=%d early=%d faults=%d lateness owner-lost: %v; owner-kept: %v; failover (owner-lost): %v; excess over failover: %v (bound p99 <= %v)",
		s.Armed, s.Unacked, s.ArmedLate, s.Fired, s.Runs, s.Lost, s.Early, s.Faults, s.OwnerLost, s.OwnerKept, s.Failover, s.Excess, MaxExcessP99)
}

// finish waits for the arming to end, then, the cluster healed, for every armed alarm to run (a
// quiet tail, up to 2 minutes after the last alarm's time or the healing, whichever is later),
// stops the pings, and checks.
func (w *alarmWorkload) finish(healed time.Time) *AlarmSummary {
	armedBy := time.Now().Add(2 * time.Minute)
	for time.Now().Before(armedBy) && !w.allArmed() {
		time.Sleep(200 * time.Millisecond)
	}
	w.mu.Lock()
	last := healed
	for _, a := range w.armed {
		last = later(last, a.Scheduled)
	}
	w.mu.Unlock()
	deadline := last.Add(2 * time.Minute)
	fires := map[string][]Fire{}
	for {
		pending := 0
		for _, a := range w.armedCopy() {
			if a.Acked.IsZero() || len(fires[a.Key]) > 0 {
				continue
			}
			fs, err := w.fires(a.Key)
			if err != nil {
				w.h.t.Fatalf("faults: %v", err)
			}
			if fires[a.Key] = fs; len(fs) == 0 {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	// Read every beeper's runs once more: a run recorded since is counted too.
	for _, a := range w.armedCopy() {
		fs, err := w.fires(a.Key)
		if err != nil {
			w.h.t.Fatalf("faults: %v", err)
		}
		fires[a.Key] = fs
	}
	w.stop()
	w.wg.Wait()
	return checkAlarms(w.armedCopy(), fires, w.h.events, w.pings)
}

func (w *alarmWorkload) allArmed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.armed) < w.n {
		return false
	}
	for _, a := range w.armed {
		if a.Acked.IsZero() {
			return false
		}
	}
	return true
}

func (w *alarmWorkload) armedCopy() []armed {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]armed, len(w.armed))
	for i, a := range w.armed {
		out[i] = *a
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkAlarms decides the alarm workload from the alarms armed, the runs read at the end, the
// faults and the pings of each shard.
func checkAlarms(as []armed, fires map[string][]Fire, events []faultEvent, pings map[int][]ping) *AlarmSummary {
	s := &AlarmSummary{Faults: len(events)}
	var lost, kept, failovers, excess []time.Duration
	for _, a := range as {
		fs := fires[a.Key]
		s.Runs += len(fs)
		for _, f := range fs {
			if f.Fired < a.Scheduled.UnixNano() {
				s.Early++
				s.Problems = append(s.Problems, fmt.Sprintf("%s ran at %v on %s, %v before its time", a.Key,
					time.Unix(0, f.Fired).Format(time.StampMilli), f.Node, a.Scheduled.Sub(time.Unix(0, f.Fired))))
			}
			if f.Scheduled != a.Scheduled.UnixNano() {
				s.Problems = append(s.Problems, fmt.Sprintf("%s ran for %v, armed for %v", a.Key,
					time.Unix(0, f.Scheduled).Format(time.StampMilli), a.Scheduled.Format(time.StampMilli)))
			}
		}
		if a.Acked.IsZero() {
			s.Unacked++
			continue
		}
		s.Armed++
		if len(fs) == 0 {
			s.Lost++
			s.Problems = append(s.Problems, fmt.Sprintf("%s, armed at %s for %v, never ran", a.Key, a.Owner, a.Scheduled.Format(time.StampMilli)))
			continue
		}
		s.Fired++
		first := time.Unix(0, slices.MinFunc(fs, func(x, y Fire) int { return int(x.Fired - y.Fired) }).Fired)
		if a.Acked.After(a.Scheduled) {
			s.ArmedLate++
			continue
		}
		late := first.Sub(a.Scheduled)
		// The owner when the alarm fell due, and when last seen so.
		owner, seen := a.Owner, a.Acked
		for _, p := range pings[a.Shard] {
			if p.ret.After(seen) && p.ret.Before(a.Scheduled) {
				owner, seen = p.node, p.ret
			}
		}
		// The latest end, by its shard's pings, of a fault that hit the owner before the run.
		var hit bool
		var recovered time.Time
		var fo time.Duration
		var cause faultEvent
		for _, ev := range events {
			if !slices.Contains(ev.Nodes, owner) || ev.At.Before(seen) || !ev.At.Before(first) {
				continue
			}
			d := failoverAfter(pings[a.Shard], ev.At)
			if end := ev.At.Add(d); !hit || end.After(recovered) {
				recovered, fo, cause = end, d, ev
			}
			hit = true
		}
		if !hit {
			kept = append(kept, late)
			if late > MaxExcessP99 {
				fire := slices.MinFunc(fs, func(x, y Fire) int { return int(x.Fired - y.Fired) })
				s.LateKept = append(s.LateKept, fmt.Sprintf("%s (shard %d, owner %s, no fault hit it): due %s, armed at %s; ran at %s on %s, %v late",
					a.Key, a.Shard, owner, a.Scheduled.Format(time.StampMilli), a.Acked.Format(time.StampMilli),
					first.Format(time.StampMilli), fire.Node, late.Round(time.Millisecond)))
			}
			continue
		}
		lost = append(lost, late)
		failovers = append(failovers, fo)
		ex := first.Sub(later(a.Scheduled, recovered))
		excess = append(excess, ex)
		if ex > MaxExcessP99 {
			fire := slices.MinFunc(fs, func(x, y Fire) int { return int(x.Fired - y.Fired) })
			s.Slow = append(s.Slow, fmt.Sprintf("%s (shard %d, owner %s): due %s; %s of %v at %s, shard served again %v later; ran at %s on %s, %v after both",
				a.Key, a.Shard, owner, a.Scheduled.Format(time.StampMilli), cause.Kind, cause.Nodes, cause.At.Format(time.StampMilli), fo.Round(time.Millisecond),
				first.Format(time.StampMilli), fire.Node, ex.Round(time.Millisecond)))
		}
	}
	s.OwnerLost, s.OwnerKept = latencyOf(lost), latencyOf(kept)
	s.Failover, s.Excess = latencyOf(failovers), latencyOf(excess)
	return s
}

// failoverAfter is the time from t to the return of the first ping of a shard that began at t or
// later; with none, the time to the last ping's return, or zero.
func failoverAfter(ps []ping, t time.Time) time.Duration {
	i, _ := slices.BinarySearchFunc(ps, t, func(p ping, t time.Time) int { return p.call.Compare(t) })
	if i < len(ps) {
		return ps[i].ret.Sub(t)
	}
	if len(ps) > 0 {
		return max(ps[len(ps)-1].ret.Sub(t), 0)
	}
	return 0
}
