package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// S-X7: a node says once when it loses the route to a peer and when the peer is back, and once when it
// loses its quorum (naming the nodes it does not reach) and when it has it again; Quorum says the
// same meanwhile. A cluster that starts (no quorum yet) is not a lost quorum.
func TestPeerWatch_SaysEachChangeOnce(t *testing.T) {
	var buf bytes.Buffer
	w := newPeerWatch("n1", slog.New(slog.NewTextHandler(&buf, nil)))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all := []string{"n1", "n2", "n3"} // a node may be listed among its own peers
	conn := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	script := []struct {
		view     view
		logged   []string // substrings of the lines logged at this step, in order
		noQuorum bool
	}{
		{view: view{connected: conn()}}, // starting: nothing known yet
		{view: view{connected: conn("n2"), members: all, size: 3}, logged: []string{"node n1 has its quorum", "2 of 3 nodes"}},
		{view: view{connected: conn("n2", "n3"), members: all, size: 3}},
		{view: view{connected: conn("n2"), members: all, size: 3}, logged: []string{"lost the route to peer n3"}},
		{view: view{connected: conn("n2"), members: all, size: 3}},
		{view: view{connected: conn(), members: all, size: 3}, noQuorum: true,
			logged: []string{"lost the route to peer n2", "node n1 lost its quorum at 00:00:05: it reaches 1 of 3 nodes (n2, n3 unreachable), and needs 2"}},
		{view: view{connected: conn(), members: all, size: 3}, noQuorum: true},
		{view: view{connected: conn("n3"), members: all, size: 3},
			logged: []string{"peer n3 is connected again", "after=4s", "node n1 has its quorum again", "after=2s"}},
		{view: view{connected: conn("n2", "n3"), members: all, size: 3}, logged: []string{"peer n2 is connected again"}},
	}
	for i, step := range script {
		buf.Reset()
		w.see(t0.Add(time.Duration(i)*time.Second), step.view)
		out := buf.String()
		rest := out
		for _, want := range step.logged {
			j := strings.Index(rest, want)
			if j < 0 {
				t.Fatalf("step %d logged:\n%s\nwant %q (in order: %q)", i, out, want, step.logged)
			}
			rest = rest[j+len(want):]
		}
		if len(step.logged) == 0 && out != "" {
			t.Fatalf("step %d logged:\n%s\nwant nothing", i, out)
		}
		err := w.quorum()
		if got := err != nil; got != step.noQuorum || (got && !errors.Is(err, ErrNoQuorum)) {
			t.Fatalf("step %d: quorum() = %v; want an error: %v", i, err, step.noQuorum)
		}
	}
	lines := strings.Count(buf.String(), "\n")
	if lines != 1 {
		t.Fatalf("the last step logged %d lines; want 1", lines)
	}
}
