// Package bench measures the durable runtime (package core) against a bare
// SQLite baseline in the same run. It holds benchmarks only.
//
// Run it from the module root:
//
//	go test -run '^$' -bench . -count 5 ./bench | tee bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest bench.txt
//
// A smoke run that executes every benchmark once takes a few minutes, most
// of them building the 10,000-object directories of ManyKeys and AlarmFire
// (DURABLE_BENCH_DIR keeps them for the next run):
//
//	go test -run '^$' -bench . -benchtime 1x ./bench
//
// # What it measures
//
//   - Per-key throughput of one object with 1, 16 and 64 concurrent callers
//     (sub-benchmarks callers=N): BenchmarkForward (the call returns a
//     constant: the cost of the gate and the turn), BenchmarkProcess (the
//     call parses and re-serializes a 1 KB JSON document: CPU work that one
//     object cannot spread over cores) and BenchmarkWrite (the call inserts
//     one row and returns once it is durable, with sync=FULL and
//     sync=NORMAL: group commit at work).
//   - BenchmarkActivate: the latency of activating an evicted object (open
//     its database, run its constructor), beside bare SQLite reopening the
//     same files and reading row 1 (object=evicted/impl=bare); the latency
//     of activating an object that wrote 0, 5, 10 or 50 MiB over its life
//     (history=NMB: old objects should cost what new ones do), after an
//     eviction by a running runtime (after=eviction) and as a restarted
//     process's first call, with the runtime's close (after=restart: a
//     runtime's first open of a file checks its headers; SQLite's quick
//     check, which reads every page, runs in the background); the first
//     call to an object of 100,000 rows (about 25 MB) after a restart,
//     beside bare SQLite opening the same file and reading row 1
//     (rows=100000/after=restart/impl=bare); and the rate at which new
//     objects with storage are created.
//   - BenchmarkResident: the memory an idle resident object with an open
//     database costs once its database is quiet (it gave its memory back a
//     second after the object's last call), from the Go heap and from the
//     process's RSS, and its file descriptors; BenchmarkResidentBare: the
//     same for bare SQLite. BenchmarkActivate/object=quiet is what the
//     first call to such an object pays for it, beside object=resident.
//   - BenchmarkManyKeys: durable writes spread over 1,000, 10,000 (and
//     100,000, 1,000,000) objects by 64 callers, keys drawn round robin
//     (MaxOpenObjects 1,024, the worst case: past the cache every call
//     activates its object), uniformly at random, or by Zipf's law (s = 1.1
//     and 0.99), with the default cache sized by the machine; impl=bare is
//     bare SQLite over the same files with a cache of the same size.
//   - BenchmarkAlarmFire: due alarms on evicted objects fired per second at
//     1,000, 10,000 (and 100,000) objects, beside bare SQLite doing each
//     fire's write over the same files, reopening them (impl=bare-reopen)
//     or with them open (impl=bare-open, the fsync rate across files).
//     BenchmarkAlarmLateness: p50 and p99 of how late 1,000 alarms due over
//     2 s start. BenchmarkAlarmPending: memory per pending alarm, and the
//     time to open a runtime with 100,000 of them.
//   - BenchmarkBaseline: the same INSERT on bare *sql.DBs (WAL,
//     synchronous=FULL, one connection each): one transaction per insert
//     (compare BenchmarkWrite/telemetry=off/sync=FULL/callers=1), 64 per transaction
//     (compare callers=64), and one per insert over 1,000 files from 64
//     goroutines (compare BenchmarkManyKeys); and an empty call through a
//     bare FIFO hand-off gate, a mutex and a queue of parked waiters, from
//     1, 16 and 64 goroutines (gate=fifo/callers=N: compare
//     BenchmarkForward/telemetry=off/callers=N). Divide a runtime figure by its baseline
//     to read the overhead.
//   - BenchmarkRoomFanout (see room_test.go) and its baseline
//     BenchmarkRoomFanoutBaseline/hub=gorilla/clients=N: the same clients
//     on a bare gorilla/websocket hub (one reader and one writer goroutine
//     per connection, one write per frame, nothing stored).
//   - BenchmarkLostUpdates: SEMANTICS C2 as a number: updates lost when a
//     turn awaits between its read and its write, and none when it does not.
//   - BenchmarkBackup: Runtime.Backup of 200 objects of about 128 KB while 16
//     callers write to them: the backup's rate, and the write load's rate
//     before and during it, in the same run.
//   - Cluster mode (cluster_test.go), against a JetStream cluster of 3
//     embedded nodes in the benchmark's process on 127.0.0.1 (package
//     cluster: 3 replicas, fsync on every write), the runtime on one of them:
//     BenchmarkClusterWrite is the durable counter increment to one object
//     from 1, 16 and 64 callers and over 1,000 objects from 64 callers
//     (objects=N/callers=N), impl=cluster and impl=cluster-normal (the local
//     SQLite at synchronous NORMAL, on another node) beside impl=single (the
//     single-process runtime, SQLite with synchronous FULL) in the same run;
//     the objects are resident (leases taken) before the clock runs.
//     BenchmarkClusterFailover is the time from the SIGKILL of an object's
//     owner until a write to it is acknowledged by another node, with the 5
//     writes acknowledged before the kill there: its nodes are 3 processes
//     (this test binary run again as package faults's runtime target, each
//     an embedded JetStream node and a runtime serving HTTP), the client
//     follows refusals to the owner they name; ns/op is that time, p50-ms and
//     p99-ms over the rounds. b.N is the number of kills and a round takes
//     seconds (the killed node is restarted outside the clock): run it with
//     -benchtime 10x, about 2 minutes on 2 cores, never a time-based one.
//     ClusterWrite takes about 3 minutes (go test -run '^$' -bench ClusterWrite
//     ./bench; then -bench ClusterFailover -benchtime 10x -timeout 10m).
//     BenchmarkClusterAppend (appends_test.go) is the engine's limit beside a
//     cluster write in the same run: raw JetStream appends to a 3-replica
//     stream, each expecting its subject's last sequence (impl=raw), and the
//     durable counter increment of a runtime in cluster mode with its
//     default settings (impl=cluster), from 1 caller to one subject (one
//     object) and from 16 callers over 16 subjects (16 objects, each in a
//     shard of its own), each raw stream configured as the shard's and both
//     led by the runtime's server; divide the two calls/s (go test -run '^$'
//     -bench ClusterAppend ./bench, under a minute).
//     BenchmarkTakeoverActivate (takeover_test.go) is the first call to an
//     object after its owner stopped as a dead machine stops and a survivor
//     took the shard over, for a log of 1,000 and 10,000 counter increments
//     since its snapshot, with the survivor's file kept warm while the owner
//     lived (file=warm) and without (file=cold: it rebuilds from the log),
//     over the in-memory engine, in the same run: p50-ms, and the records
//     the survivor read (records/op). A round takes a few LeaseTTL (500 ms)
//     outside the clock: run it with -benchtime 5x, about 5 minutes for
//     -count 3 on 2 cores (-bench 'TakeoverActivate$').
//     BenchmarkTakeoverActivateNATS is the same over JetStream (3 embedded
//     nodes, the owner dying with its node), with a lease time of 1 s; a
//     round takes tens of seconds: -benchtime 3x.
//     BenchmarkRoutedCall (route_test.go) is a method (core.Define) called at
//     the object's owner (impl=local) and at another node, which sends it to
//     the owner (impl=routed), in the same run: a read and a durable write
//     (op=read, op=write), from 1, 16 and 64 callers, over the in-memory
//     engine (transport=mem) and over NATS (transport=nats: the two runtimes
//     on different nodes of the 3, so the hop crosses a route, and op=read's
//     impl=bare, a bare NATS request-reply between the same connections: the
//     floor a routed read cannot go under); about a minute (go test -run
//     '^$' -bench RoutedCall ./bench). For writes it reports the owner's
//     turns per commit: with 16 callers, 16 when every caller's write shares
//     one commit per round, whether the calls came from the owner or from
//     another node. With 16 and 64 callers a routed call is bound by the CPU
//     of the process (3 servers and 2 runtimes on 2 cores): read its
//     cpu-us/op beside impl=local's and impl=bare's.
//     BenchmarkClusterAlarmFire (cluster_alarm_test.go) is the rate at which
//     alarms fire in cluster mode, 256 objects each re-arming its alarm for
//     now in its run (one storage write, one commit), run by 1 node and by
//     3 (nodes=N, each node the shards placement gives it), over the
//     in-memory engine, in the same run; about a minute (go test -run '^$'
//     -bench ClusterAlarmFire -benchtime 5s ./bench).
//     (ReplicaCommit, ReplicaShipCost, ReplicaActivate and ReplicaReplay in
//     replica_test.go measure the runtime's own cost of cluster mode over the
//     in-memory engine of coretest, without a network.)
//
// Every benchmark opens its own runtime over a fresh temporary directory
// and closes it, except those over many objects (ManyKeys, AlarmFire):
// they build their directories once per process and reuse them for every
// round and count. Two environment variables drive them:
//
//   - DURABLE_BENCH_LARGE=1 adds the 100,000-object cases (building their
//     directories takes minutes).
//   - DURABLE_BENCH_DIR=dir builds the directories in dir and reuses them
//     in later runs of the same binary (give each version its own).
//
// # Old against new
//
// The storage figures (activation, activation by history size, ManyKeys,
// AlarmFire, alarm lateness, Open with pending alarms) and the per-key ones
// (Forward at 1 and 64 callers, durable Write at 64 callers, with
// telemetry off) of the runtime at a revision against the work tree, from
// the same benchmark code, five interleaved runs of each binary, so that a
// shared machine's load falls on both alike:
//
//	bash bench/compare.sh main 5
//
// It prints the directory holding old.txt, new.txt and the load averages
// (uptime.txt). Compare medians, and each figure with its baseline from the
// same run (impl=bare, history=0MB, objects=1000, gate=fifo, txn=batched).
// SET=hot measures only the turn's path: Forward at 1 and 64 callers (with
// gate=fifo), Process and Write at 64 (with txn=batched) and RoomFanout at
// 100 clients (with its gorilla hub):
//
//	SET=hot bash bench/compare.sh main 5
//
// On a loaded machine a ratio to a baseline is an upper bound, not a
// result: cpu-us/op and allocs/op are the figures to read there.
//
// # Reading the units
//
// ns/op, B/op and allocs/op are per call (per insert for the baseline,
// per activation or per object created for Activate, per round of 1,000
// objects for Resident, per round of 50 reservations for LostUpdates).
// The named units are:
//
//   - calls/s: completed calls (or inserts) per second of benchmark time,
//     over all callers: b.N / b.Elapsed(). It is the inverse of ns/op,
//     stated the way the targets are.
//   - cpu-us/op: the process's CPU time (user and system) per call over the
//     timed part, in microseconds (Forward, Process, Write, ManyKeys,
//     Activate/object=new, Activate/rows=100000 (per activation, both
//     impls), Baseline/gate=fifo, Baseline/txn=batched,
//     Baseline/txn=per-insert/files=1000, RoutedCall and ClusterAppend):
//     it counts the work done in the background for the calls too (closing
//     evicted databases, the GC, the embedded servers), and other load on a
//     shared machine inflates it far less than it does the rates.
//   - commits/op: durable commits per call (Runtime.Stats().Commits / b.N).
//     1 means every call paid its own fsync; 1/64 means 64 calls shared one.
//   - activations/op (ManyKeys): the share of calls that found their object
//     evicted. What one such cache miss costs in CPU is the difference of
//     cpu-us/op between a case with misses and one without (objects=10000
//     against objects=1000, same dist), divided by activations/op: on a
//     loaded machine it says more than the rates do. A miss opens the
//     object's database (SQLite reads the schema and the log's index) and
//     closes another's, off the caller's goroutine; its first commit also
//     fsyncs the directory (SQLite does so at the first sync of every log
//     it opens). core/internal/sqlstore's BenchmarkOpenClose measures the
//     open and close alone, with 10 and 4,000 other databases open.
//   - p50-activate-us, p90-activate-us: median and 90th percentile latency
//     of one activation of an evicted object, in microseconds.
//   - objects/s: new objects created (constructor run, first commit made)
//     per second.
//   - B/resident-object: Go heap and stack in use per resident idle
//     object (HeapInuse+StackInuse growth after a GC, divided by the
//     objects). rss-B/resident-object: the process's resident set growth
//     per object, which includes SQLite's own memory (allocated outside the
//     Go heap by modernc.org/libc) and the page cache of its files' maps.
//   - MB/s, objects/s (Backup): bytes and objects copied per second of
//     backup. calls/s-before, calls/s-during: the write load's calls per
//     second over 1 s before the backups and over the backups.
//   - lost-updates: reservations that reported success but whose decrement
//     was overwritten, per round of 50 concurrent reservations.
//   - p50-ms, p99-ms (ClusterFailover): the time until an object serves
//     again on another node once its owner is killed, in milliseconds.
//   - p50-us, p99-us (RoutedCall): the latency of a call, over the last
//     65,536 calls of the round, in microseconds.
//   - turns/commit (RoutedCall, op=write): the turns each of the owner's
//     commits served over the round (group commit).
//   - call-us, append-us (ClusterAppend): the mean time of one call (a raw
//     append, a cluster write), and of one append the runtime made to its
//     log (impl=cluster); call-us less append-us is what a write adds to
//     its append.
//   - alarms/s (ClusterAlarmFire): alarm runs per second of the loop.
//
// The machine matters: throughput of durable writes is bounded by how many
// fsyncs per second the disk does, and BenchmarkBaseline/txn=per-insert is
// that bound for one file. Use medians of several counts; shared machines
// are noisy.
package bench
