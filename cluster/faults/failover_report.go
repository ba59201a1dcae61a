package faults

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Stall is how long an object may take to serve again before the report counts it a stall.
const Stall = 5 * time.Second

// Row is the figures of one class of objects in one scenario. The classes say what the lost node
// was to the object: "owner", it owned the object (and did not lead its raft group); "group", it
// led the object's raft group (the stream of the object's shard) and another node owned the
// object; "both"; "other", neither; "all" in scenario e, where every
// node was lost. "owner+meta" and "both+meta" are the lost node's objects when it also led the
// JetStream meta group.
type Row struct {
	Scenario, Class string
	Kills, Objects  int           // kills with an object of the class; objects over those kills
	P50, P99, Max   time.Duration // of the time from the kill to the object's first acknowledged write
	Stalls          int           // objects that took longer than Stall
	Unserved        int           // objects not served again within the cap
	Election        time.Duration // median over the kills: from the kill until every group the node led had a new leader
	OverElection    time.Duration // p99 of each object's time less its kill's election
}

// classes are the classes of objects, in the order of the report's rows.
var classes = []string{"owner", "owner+meta", "both", "both+meta", "group", "other", "all"}

// percentile is the nearest-rank p-th quantile of ds (0 for none).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Rows returns a row per scenario and class, in the order the scenarios ran.
func (r *FailoverReport) Rows() []Row {
	type k struct{ s, c string }
	var order []k
	took, over := map[k][]time.Duration{}, map[k][]time.Duration{}
	elections := map[k]map[int]time.Duration{}
	rows := map[k]*Row{}
	for _, smp := range r.Samples {
		key := k{smp.Scenario, smp.Class}
		row := rows[key]
		if row == nil {
			row = &Row{Scenario: smp.Scenario, Class: smp.Class}
			rows[key] = row
			elections[key] = map[int]time.Duration{}
			order = append(order, key)
		}
		row.Objects++
		took[key] = append(took[key], smp.Took)
		over[key] = append(over[key], smp.Took-smp.Election)
		elections[key][smp.Kill] = smp.Election
		if smp.Took > Stall {
			row.Stalls++
		}
		if !smp.Served {
			row.Unserved++
		}
	}
	slices.SortStableFunc(order, func(a, b k) int {
		if c := slices.Index(Scenarios, a.s) - slices.Index(Scenarios, b.s); c != 0 {
			return c
		}
		return slices.Index(classes, a.c) - slices.Index(classes, b.c)
	})
	var out []Row
	for _, key := range order {
		row := rows[key]
		row.Kills = len(elections[key])
		row.P50, row.P99, row.Max = percentile(took[key], 0.5), percentile(took[key], 0.99), percentile(took[key], 1)
		var es []time.Duration
		for _, e := range elections[key] {
			es = append(es, e)
		}
		row.Election, row.OverElection = percentile(es, 0.5), percentile(over[key], 0.99)
		out = append(out, *row)
	}
	return out
}

// Table is the report as a table: a line per scenario and class, then a line per scenario with
// its calls.
func (r *FailoverReport) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-10s %5s %7s %8s %8s %8s %9s %8s %8s %10s\n", "scenario", "class", "kills", "objects", "p50", "p99", "max", "stalls>5s", "unserved", "election", "p99-elect")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
	var scenarios []string
	for _, row := range r.Rows() {
		fmt.Fprintf(&b, "%-8s %-10s %5d %7d %8s %8s %8s %9d %8d %8s %10s\n", row.Scenario, row.Class, row.Kills, row.Objects,
			ms(row.P50), ms(row.P99), ms(row.Max), row.Stalls, row.Unserved, ms(row.Election), ms(row.OverElection))
		if !slices.Contains(scenarios, row.Scenario) {
			scenarios = append(scenarios, row.Scenario)
		}
	}
	for _, s := range scenarios {
		fmt.Fprintf(&b, "scenario %s: %d write calls, %d failed (not acknowledged within the budget), %d attempts with an unknown outcome\n",
			s, r.Calls[s], r.Failed[s], r.Unknown[s])
	}
	if len(r.Anomalies) > 0 {
		fmt.Fprintf(&b, "%d broken promises: %s\n", len(r.Anomalies), strings.Join(r.Anomalies, "; "))
	}
	return b.String()
}

// Misses returns what the report shows short of the failover targets (none: it meets them all):
// every object served again within the cap; no broken promise; (a) an owner that leads no group,
// its objects p99 <= 1.5 s; (b) a node that leads groups, the survivors' objects in them p99 <=
// election + 1 s, the others p99 <= 1 s (no stall), and the same in bmeta, where it led the
// JetStream meta group too; (c), (c') and bmeta, the lost node's objects p99 <= election + 1.5 s; (d) a replaced machine's objects and (e) every object after a full restart
// within 15 s; (f) no failed call across a drain.
func (r *FailoverReport) Misses() []string {
	var miss []string
	for _, a := range r.Anomalies {
		miss = append(miss, "broken promise: "+a)
	}
	for _, row := range r.Rows() {
		at := fmt.Sprintf("scenario %s, class %s", row.Scenario, row.Class)
		if row.Unserved > 0 {
			miss = append(miss, fmt.Sprintf("%s: %d objects not served again within the cap", at, row.Unserved))
		}
		check := func(what string, got, bound time.Duration) {
			if got > bound {
				miss = append(miss, fmt.Sprintf("%s: %s %v > %v", at, what, got.Round(time.Millisecond), bound))
			}
		}
		switch {
		case row.Scenario == ScenarioNoLeader && row.Class == "owner":
			check("p99", row.P99, 1500*time.Millisecond)
		case (row.Scenario == ScenarioLeader || row.Scenario == ScenarioMetaOnly) && row.Class == "group":
			check("p99 less the election", row.OverElection, time.Second)
		case (row.Scenario == ScenarioLeader || row.Scenario == ScenarioMetaOnly) && row.Class == "other":
			check("p99", row.P99, time.Second)
		case (row.Scenario == ScenarioBoth || row.Scenario == ScenarioMeta || row.Scenario == ScenarioMetaOnly) && row.Class != "group" && row.Class != "other":
			check("p99 less the election", row.OverElection, 1500*time.Millisecond)
		case row.Scenario == ScenarioReplaced && row.Class != "group" && row.Class != "other",
			row.Scenario == ScenarioAll:
			check("max", row.Max, 15*time.Second)
		}
	}
	for s, n := range r.Failed {
		if s == ScenarioDrain && n > 0 {
			miss = append(miss, fmt.Sprintf("scenario %s: %d calls failed across a drain", s, n))
		}
	}
	return miss
}
