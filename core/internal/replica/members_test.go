package replica

import (
	"testing"
)

// highest returns the name with the highest rendezvous weight for shard.
func highest(names []string, shard int) string {
	best, bestScore := "", uint64(0)
	for _, name := range names {
		if s := score(name, shard); best == "" || s > bestScore {
			best, bestScore = name, s
		}
	}
	return best
}

// Rendezvous hashing spreads shards evenly over the nodes, and a node's removal moves only its own
// shards, spread evenly over the others.
func TestScore_SpreadsAndMovesOnlyTheLostNodesShards(t *testing.T) {
	const shards = 1200
	names := []string{"n1", "n2", "n3", "n4"}
	count := map[string]int{}
	for s := range shards {
		count[highest(names, s)]++
	}
	for _, name := range names {
		if got, want := count[name], shards/len(names); got < want*8/10 || got > want*12/10 {
			t.Errorf("%s is picked for %d of %d shards; want about %d", name, got, shards, want)
		}
	}
	moved := map[string]int{}
	for s := range shards {
		before, after := highest(names, s), highest(names[1:], s)
		if before != "n1" && after != before {
			t.Fatalf("shard %d moved from %s to %s though %s is still there", s, before, after, before)
		}
		if before == "n1" {
			moved[after]++
		}
	}
	for _, name := range names[1:] {
		if got, want := moved[name], count["n1"]/3; got < want*7/10 || got > want*13/10 {
			t.Errorf("%s took %d of n1's %d shards; want about %d", name, got, count["n1"], want)
		}
	}
}
