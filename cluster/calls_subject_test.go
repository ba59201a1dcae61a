package cluster

import (
	"fmt"
	"testing"
)

// A node's call subject is the same whether it is remembered or not, and an engine remembers at
// most maxCallSubjects of them, however many nodes it is asked about.
func TestEngine_CallSubjectsBounded(t *testing.T) {
	e := &Engine{cfg: Config{Prefix: "p"}}
	for round := range 2 { // the second round reads what the first remembered
		for i := range maxCallSubjects + 10 {
			node := fmt.Sprintf("node %d", i)
			got, err := e.callSubject(node)
			if want := fmt.Sprintf("p.call.node=20%d", i); err != nil || got != want {
				t.Fatalf("round %d: callSubject(%q) = %q, %v; want %q", round, node, got, err, want)
			}
		}
	}
	n := 0
	e.callSubjects.Range(func(_, _ any) bool { n++; return true })
	if n != maxCallSubjects {
		t.Errorf("%d call subjects remembered; want %d", n, maxCallSubjects)
	}
	if _, err := e.callSubject(""); err == nil {
		t.Errorf("callSubject of an empty name: nil error")
	}
}
