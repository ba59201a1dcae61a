// Package faults is a harness that decides whether a replicated target keeps its promises
// through the failures of machines: node processes on 127.0.0.1, each with its own directory,
// killed (SIGKILL, one or all at once), stopped (SIGSTOP) for longer than a lease, cut off from
// each other both ways or one way (every link between two nodes goes through a TCP proxy the
// harness controls), and restarted, on a schedule drawn from a seed; meanwhile clients append
// with expected sequences and read the last record of a few keys through random nodes, each
// operation recorded with its call and return times and its outcome (ok, conflict, unknown).
//
// After the faults every link is healed and every node brought back, each key's records are read
// through every node (they must agree), and Check decides: every acknowledged append is there, at
// its sequence; no record is there that no client wrote after its predecessor; epochs (where
// records carry them) never decrease; and the history is linearizable (porcupine), an operation
// whose outcome is unknown being left open from its call on.
//
// A Target says what the node processes run and how clients reach them; EngineTarget is the
// JetStream engine of package cluster alone. The harness runs as a test behind the build tag
// "faults":
//
//	go test -tags faults ./cluster/faults -run TestFaults -faults.duration=45s -faults.seed=1
//	go test -tags faults ./cluster/faults -run TestFaults -faults.duration=10m -faults.nodes=5 -timeout=30m
//
// and prints a summary line: cycles, kills, stops, partitions, operations, acknowledged appends
// checked, lost, and porcupine's verdict per key.
package faults
