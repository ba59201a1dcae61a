package main

import (
	"errors"
	"strings"
	"testing"
)

// Cluster flags without -node are refused with a message that says why.
func TestServe_ClusterFlagsNeedNode(t *testing.T) {
	var out syncBuffer
	err := serve(t.Context(), []string{"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-routes", "nats://127.0.0.1:1"}, &out, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "-node") {
		t.Fatalf("serve -routes without -node: %v", err)
	}
}

// The cluster command refuses a number of nodes without a majority to
// lose, saying what it wants, and starts nothing.
func TestCluster_NodesFlag(t *testing.T) {
	for _, n := range []string{"2", "10"} {
		var out syncBuffer
		err := runTo(t.Context(), []string{"cluster", "-nodes", n, "-data", t.TempDir()}, &out, &out)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(out.String(), "-nodes "+n+": want 3 to 9") {
			t.Fatalf("cluster -nodes %s: %v\n%s", n, err, out.String())
		}
	}
}

// The nodes' lines are written whole, each prefixed with its node's name;
// a last line without its end is written at the exit, and a line not
// ended after maxLine bytes is written as it is rather than held.
func TestCluster_PrefixedLines(t *testing.T) {
	var out syncBuffer
	lw := &lineWriter{w: &out}
	p := lw.prefixed("n1")
	p.Write([]byte("one\ntw"))
	p.Write([]byte("o\nthree"))
	if got, want := out.String(), "n1  | one\nn1  | two\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	p.flush()
	long := strings.Repeat("x", maxLine)
	p.Write([]byte(long))
	want := "n1  | one\nn1  | two\nn1  | three\nn1  | " + long + "\n"
	if got := out.String(); got != want || len(p.partial) != 0 {
		t.Fatalf("got %d bytes, want %d, %d held: %q...", len(got), len(want), len(p.partial), got[:min(len(got), 80)])
	}
}
