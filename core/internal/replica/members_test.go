package replica

import (
	"testing"
	"time"
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

// S-CL4: a beat that names a shard's lease at an older revision than one already heard (two beats
// of a node crossed on the way) does not take the sighting back: the lease stays timed from when
// its newest revision was first heard, so that a takeover counts from the holder's last renewal.
func TestHeard_OlderRevisionDoesNotRetimeTheLease(t *testing.T) {
	now := time.Unix(1000, 0)
	n := &Node{cfg: Config{Node: "n2", LeaseTTL: 4 * time.Second, Now: func() time.Time { return now }},
		held: map[int]*lease{}, seen: map[int]seenLease{}, members: map[string]*member{}, offered: map[int]string{},
		handedIn: make(chan struct{}), wake: make(chan struct{}, 1)}
	beat := func(rev uint64) []byte {
		return encodeBeat(beatMsg{Node: "n1", Inc: "a", Ready: true, Shards: map[int]uint64{9: rev}})
	}
	n.heard(beat(2))
	first := now
	now = now.Add(time.Second)
	n.heard(beat(1)) // sent before the beat of revision 2, heard after it
	s := n.seen[9]
	if s.rev != 2 || !s.at.Equal(first) {
		t.Fatalf("the lease is seen at revision %d since %v; want revision 2 since %v", s.rev, s.at, first)
	}
	now = now.Add(time.Second)
	n.heard(beat(3)) // renewed: timed afresh
	if s := n.seen[9]; s.rev != 3 || !s.at.Equal(now) {
		t.Fatalf("the lease is seen at revision %d since %v; want revision 3 since %v", s.rev, s.at, now)
	}
}
