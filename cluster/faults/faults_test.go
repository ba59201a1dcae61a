//go:build faults

package faults_test

import (
	"flag"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/durable-go/durable/cluster/faults"
)

var (
	duration = flag.Duration("faults.duration", 45*time.Second, "how long faults are injected")
	seed     = flag.Uint64("faults.seed", 1, "the seed of the fault schedule and the clients")
	nodes    = flag.Int("faults.nodes", 3, "node processes (3 or 5)")
	target   = flag.String("faults.target", "engine", "what to put through the faults")
	grace    = flag.Duration("faults.grace", faults.DefaultGrace, "how long a fault's window lasts after every node is ready again")
	avail    = flag.Bool("faults.require-availability", false, "fail if the operations outside fault windows miss the availability targets")
	alarms   = flag.Int("faults.alarms", 48, "objects whose alarms the runtime target arms during the run (0: none)")
	bound    = flag.Bool("faults.alarmbound", true, "fail the run if the alarms whose owner was lost run over a second (p99) after their shard's failover")
	keepLogs = flag.Bool("faults.keeplogs", false, "keep the node processes' logs in a directory the run names (they are kept anyway when the run fails)")
	nodeLog  = flag.String("faults.nodelog", "warn", "the level of the node processes' logs: debug, info, warn or error")
)

var targets = []faults.Target{faults.EngineTarget{}, faults.RuntimeTarget{}}

func TestMain(m *testing.M) {
	faults.RunIfNode(targets...) // a node process never returns from here
	flag.Parse()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// S-X5: node processes are killed (one, or all at once), stopped for longer than a lease,
// partitioned (both ways and one way) and restarted, while clients append with expected sequences
// and read the last record through random nodes. After healing, every acknowledged append is
// there, at its sequence; no record appears that no client wrote after its predecessor; and each
// key's history is linearizable.
func TestFaults(t *testing.T) {
	var tg faults.Target
	for _, c := range targets {
		if c.Name() == *target {
			tg = c
		}
	}
	if tg == nil {
		t.Fatalf("no target %q", *target)
	}
	cfg := faults.Config{Target: tg, Nodes: *nodes, Duration: *duration, Seed: *seed, Grace: *grace,
		KeepLogs: *keepLogs, NodeLog: *nodeLog}
	if tg.Name() == "runtime" {
		cfg.Alarms = *alarms
	}
	sum := faults.Run(t, cfg)
	t.Log(sum)
	t.Logf("refusals in fault windows, most frequent first:%s", sum.In.TopRefusals(5))
	t.Logf("refusals outside fault windows, most frequent first:%s", sum.Out.TopRefusals(5))
	if *avail {
		for _, m := range sum.Out.Misses() {
			t.Errorf("availability: %s", m)
		}
	}
	if sum.Alarms != nil {
		// S-CL9: every armed alarm runs at least once, never before its time, and after its owner's
		// loss within a second of its shard's failover (p99).
		t.Log(sum.Alarms)
		if !sum.Alarms.Sound() || *bound && !sum.Alarms.OK() {
			t.Errorf("%s", sum.Alarms)
		}
	}
	if !sum.OK() {
		t.Errorf("%s", sum)
	}
	if sum.Acked == 0 || sum.Cycles == 0 {
		t.Errorf("the run checked nothing: %s", sum)
	}
}
