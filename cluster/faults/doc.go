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
// JetStream engine of package cluster alone (raw appends with expected sequences), RuntimeTarget
// the runtime in cluster mode over it (a register object per key, written with an expected
// version through any node, which sends the call to the key's owner; a call that reached no owner
// is refused, which stores nothing and is left out of the linearizability check; the epochs of
// each object's log are checked too). The
// harness runs as a test behind the build tag "faults" (-faults.target=runtime for the runtime):
//
//	go test -tags faults ./cluster/faults -run TestFaults -faults.duration=45s -faults.seed=1
//	go test -tags faults ./cluster/faults -run TestFaults -faults.duration=45s -faults.seed=1 -faults.target=runtime
//	go test -tags faults ./cluster/faults -run TestFaults -faults.duration=10m -faults.nodes=5 -timeout=30m
//
// and prints a summary line: cycles, kills, stops, partitions, operations, acknowledged appends
// checked, refusals, lost, log records whose epochs were checked, and porcupine's verdict per key.
//
// # Alarms through the faults
//
// With the runtime target the run also arms alarms (-faults.alarms, 48 by default; 0 for none):
// one on each of that many objects, spread over the run and over the shards, each due 4 to 12 s
// after it is armed, through random nodes, while a prober calls one object of each shard every
// 250 ms. An alarm's run records, in the run's own commit, the time it was set for, the time it ran
// by the running node's clock, and the node. After the faults the cluster is healed and given a
// quiet tail (up to 2 minutes past the last alarm's time) for every alarm to run; then every
// armed alarm must have run at least once and never before its time (the nodes share this
// machine's clock, so no margin is allowed), and the alarms whose owner a fault hit before they ran
// must run within a second (p99) of their shard's failover, the time from the fault to the first
// call of the shard's probe that began after it and was served (AlarmSummary). A second summary
// line gives the lateness (p50, p99, max) of the alarms whose owner was lost and of the others, the
// failovers, and the excess over them, and the faults log each alarm over the bound
// (-faults.alarmbound=false reports the bound without failing the run on it).
//
// # Failover, measured by failing
//
// RunFailover (the test TestFailover, behind the same tag) measures how long objects go unserved
// when a node is lost. It starts three node processes of the runtime target (StartCluster: each
// serves, besides the registers, GET /readyz, 200 once the node is ready, GET /status, a
// NodeStatus naming the raft groups the node leads, the JetStream meta leader as it knows it and
// the shards' owners, and POST /handover, which hands the node's raft leaderships over), and a
// writer per object (12) that writes without pause through a client like a real one: a refusal
// naming the owner sends the write there at once, a node that is down or does not answer sends it
// to another, and a call not acknowledged within its budget (10 s) fails. Then, per
// scenario, it loses a node again and again (10 kills), each time waiting first for every node to
// be ready and every object to be served, and measures, per object, the time from the loss to the
// object's first acknowledged write whose attempt began after it:
//
//	a      SIGKILL an owner that leads no raft group (its raft leaderships handed over first)
//	b      SIGKILL a node that leads raft groups (owning as few objects as any node does)
//	c      SIGKILL an owner that leads raft groups
//	cmeta  SIGKILL the JetStream meta leader
//	d      SIGKILL an owner, delete its directory, start it again under its name (a replaced machine)
//	e      SIGKILL every node, start them all again; timed from the last start
//	f      SIGTERM an owner that leads raft groups (it drains), start it again; failed calls counted
//
// It prints a table, a row per scenario and class of object: "owner" (the lost node owned it and
// did not lead its raft group, the stream of its shard, which holds the shard's lease, the
// object's log and its snapshots), "group" (it led it, another node owned the object), "both",
// "other", "all" (scenario e), and "owner+meta" or "both+meta" for the lost node's objects when it
// led the JetStream meta group too; with the kills and
// objects measured, p50, p99 and max, the objects that took over 5 s (stalls) or were not served
// again within a minute, the median time until every group the lost node led had a new leader
// ("election", polled through the other nodes' /status), and the p99 of each object's time less
// its kill's election. Then, per scenario, the write calls, those that failed, and the attempts
// whose outcome was unknown. The test fails if an object is not served again within a minute, if a
// writer finds an acknowledged write lost or a value nobody wrote, and (-failover.bounds, the
// default) if a figure misses issue 22's target (FailoverReport.Misses). A scenario takes 2 to 5
// minutes on a 2-core machine; run a few at a time:
//
//	go test -tags faults ./cluster/faults -run TestFailover -v -failover.scenario=a,b,c -timeout 20m
//	go test -tags faults ./cluster/faults -run TestFailover -v -failover.scenario=cmeta,d -timeout 20m
//	go test -tags faults ./cluster/faults -run TestFailover -v -failover.scenario=e,f -timeout 20m
//	go test -tags faults ./cluster/faults -run TestFailover -v -failover.kills=2 -failover.bounds=false
//
// Other flags: -failover.objects (12), -failover.shards (16), -failover.budget (10s). The figures
// depend on the machine's load: note the load average beside them.
package faults
