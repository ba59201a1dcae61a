package core

import (
	"testing"
	"time"
)

// S-CL14: the memory of recent calls is bounded in number and in time, and forgets a call that
// did not run.
func TestRecentCalls_Bounds(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecentCalls(2, time.Minute, func() time.Time { return now })
	run := func(id string) bool {
		c, first := r.begin(id)
		if first {
			r.finish(c, []byte("reply "+id), true)
		}
		return first
	}
	for _, id := range []string{"a", "b"} {
		if !run(id) {
			t.Fatalf("%s: not new", id)
		}
	}
	if run("b") {
		t.Fatalf("b sent again: run again; want its reply")
	}
	run("c") // a is the oldest of three: forgotten
	if !run("a") {
		t.Fatalf("a after two more: remembered; want forgotten (at most 2)")
	}
	now = now.Add(2 * time.Minute)
	run("d")
	if !run("c") {
		t.Fatalf("c after RememberFor: remembered; want forgotten")
	}
	c, _ := r.begin("refused")
	r.finish(c, []byte("moved"), false)
	if _, first := r.begin("refused"); !first {
		t.Fatalf("a call refused before its turn: remembered; want run when sent again")
	}
}
