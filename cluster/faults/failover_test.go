//go:build faults

package faults_test

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster/faults"
)

var (
	failoverKills     = flag.Int("failover.kills", 10, "kills per failover scenario")
	failoverScenarios = flag.String("failover.scenario", strings.Join(faults.Scenarios, ","), "failover scenarios to run, in order: "+strings.Join(faults.Scenarios, ","))
	failoverObjects   = flag.Int("failover.objects", 12, "objects written, each by its own writer")
	failoverShards    = flag.Int("failover.shards", 16, "streams of the log")
	failoverBudget    = flag.Duration("failover.budget", 10*time.Second, "a write call not acknowledged within it fails")
	failoverTrace     = flag.Duration("failover.trace", 0, "print the attempts since the kill of each object served later than this after it (0: none)")
	failoverBounds    = flag.Bool("failover.bounds", true, "fail when a figure misses its target (SEMANTICS X9); false: only unserved objects and broken promises fail")
)

// S-X9: three node processes of the runtime target, writers on a dozen objects that follow the
// refusals' named owners, and a node lost (SIGKILL, a replaced machine, all nodes, a SIGTERM
// drain) again and again: each object's time from the loss to its first acknowledged write after
// it, per scenario and per what the lost node was to the object. Every object serves again within
// the cap, no acknowledged write is lost, and (with -failover.bounds) each figure meets its target.
func TestFailover(t *testing.T) {
	rep := faults.RunFailover(t, faults.FailoverConfig{
		Kills: *failoverKills, Scenarios: strings.Split(*failoverScenarios, ","), Objects: *failoverObjects,
		Shards: *failoverShards, Budget: *failoverBudget, Trace: *failoverTrace,
	})
	t.Logf("failover:\n%s", rep.Table())
	if len(rep.Samples) == 0 {
		t.Fatal("failover: no object was measured")
	}
	for _, m := range rep.Misses() {
		if *failoverBounds || strings.HasPrefix(m, "broken promise") || strings.Contains(m, "not served again") {
			t.Error(m)
		} else {
			t.Log("missed: " + m)
		}
	}
}
