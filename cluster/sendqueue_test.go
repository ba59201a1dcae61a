package cluster

import (
	"slices"
	"testing"
)

// One goroutine at a time sends a sendQueue, and it takes every message added until it finds the
// queue empty: a message added while it publishes is taken by it, never left for a sender that may
// not come.
func TestSendQueue_TheSenderTakesAllUntilEmpty(t *testing.T) {
	var q sendQueue[string]
	type step struct {
		add      string   // a message to add, or take if ""
		wantSend bool     // add: whether its caller is to send
		wantTake []string // take: what it returns
	}
	steps := []step{
		{add: "a", wantSend: true},
		{add: "b"},
		{wantTake: []string{"a", "b"}},
		{add: "c"}, // while the sender publishes a and b: it takes c too
		{wantTake: []string{"c"}},
		{wantTake: nil}, // the sender is done
		{add: "d", wantSend: true},
		{wantTake: []string{"d"}},
		{wantTake: nil},
	}
	for i, s := range steps {
		if s.add != "" {
			if got := q.add(s.add); got != s.wantSend {
				t.Fatalf("step %d: add(%q) = %v; want %v", i, s.add, got, s.wantSend)
			}
			continue
		}
		if got := q.take(); !slices.Equal(got, s.wantTake) {
			t.Fatalf("step %d: take() = %q; want %q", i, got, s.wantTake)
		}
	}
}
