#!/bin/bash
# compare.sh REV [COUNT]: the figures of the runtime at REV (old) against
# the work tree (new), from the same benchmark code, COUNT (5) interleaved
# runs of each, so that a shared machine's load falls on both alike: the
# storage figures (activation, activation by history, ManyKeys, AlarmFire,
# alarm lateness, Open with pending alarms) and the per-key ones (Forward at
# 1 and 64 callers, durable Write at 64 callers), each beside its baseline
# (impl=bare..., gate=fifo, txn=batched) in the same run. Results go to
# old.txt and new.txt in $OUT (a temporary directory), the load average
# before each run to uptime.txt; read medians with benchstat, or the ratios
# to the baselines in each run. DURABLE_BENCH_LARGE=1 adds the
# 100,000-object cases. SET=hot runs only the per-key figures (Forward at 1
# and 64 callers, Process and Write at 64, RoomFanout at 100 clients, with
# their baselines): the check for a change to the turn's path. Where REV's API differs from the work
# tree's, so that today's benchmark code does not build against it, REV is
# measured with its own benchmark code, and the script says so.
set -euo pipefail
rev=${1:?usage: compare.sh REV [COUNT]}
count=${2:-5}
root=$(git rev-parse --show-toplevel)
OUT=${OUT:-$(mktemp -d)}
old=$OUT/old-tree
git -C "$root" worktree add --detach "$old" "$rev" >/dev/null
trap 'git -C "$root" worktree remove --force "$old"' EXIT
cp "$root"/bench/*_test.go "$old/bench/"
if ! (cd "$old" && go test -c -o "$OUT/bench.old" ./bench >/dev/null 2>&1); then
	echo "compare.sh: today's benchmarks do not build against $rev; $rev is measured with its own" >&2
	git -C "$old" checkout -- bench && git -C "$old" clean -fdq bench
	(cd "$old" && go test -c -o "$OUT/bench.old" ./bench)
fi
(cd "$root" && go test -c -o "$OUT/bench.new" ./bench)
for i in $(seq "$count"); do
	for v in old new; do
		export DURABLE_BENCH_DIR=$OUT/dirs-$v
		mkdir -p "$DURABLE_BENCH_DIR"
		uptime >>"$OUT/uptime.txt"
		# A benchmark that fails (AlarmLateness refuses a run whose arming
		# overran its margin on a loaded machine) is noted in the results
		# and the others go on.
		# Each pattern is anchored: -bench matches every level of a name
		# on its own, and an unanchored "Write" would also run the setup of
		# BenchmarkClusterWrite (three JetStream nodes, 3,000 objects).
		run() { "$OUT/bench.$v" -test.run '^$' "$@" >>"$OUT/$v.txt" 2>&1 || echo "FAILED: $*" >>"$OUT/$v.txt"; }
		if [ "${SET:-}" = hot ]; then
			run -test.bench '^BenchmarkForward/telemetry=off/callers=(1|64)$' -test.benchtime 1s
			run -test.bench '^BenchmarkBaseline/gate=fifo/callers=(1|64)$' -test.benchtime 1s
			run -test.bench '^BenchmarkProcess/callers=64$' -test.benchtime 1s
			run -test.bench '^BenchmarkWrite/telemetry=off/sync=FULL/callers=64$' -test.benchtime 1s
			run -test.bench '^BenchmarkBaseline/txn=batched$' -test.benchtime 1s
			run -test.bench '^BenchmarkRoomFanout/clients=100$' -test.benchtime 2s
			run -test.bench '^BenchmarkRoomFanoutBaseline/hub=gorilla/clients=100$' -test.benchtime 2s
			continue
		fi
		run -test.bench '^BenchmarkActivate/object=evicted/' -test.benchtime 400x
		run -test.bench '^BenchmarkActivate/history=' -test.benchtime 40x
		run -test.bench '^BenchmarkManyKeys$' -test.benchtime 4000x
		run -test.bench '^BenchmarkAlarmFire$' -test.benchtime 1x
		run -test.bench '^Benchmark(AlarmLateness|AlarmPending)$' -test.benchtime 1x
		run -test.bench '^BenchmarkForward/telemetry=off/callers=(1|64)$' -test.benchtime 1s
		run -test.bench '^BenchmarkBaseline/gate=fifo/callers=(1|64)$' -test.benchtime 1s
		run -test.bench '^BenchmarkWrite/telemetry=off/sync=FULL/callers=64$' -test.benchtime 1s
		run -test.bench '^BenchmarkBaseline/txn=batched$' -test.benchtime 1s
	done
done
echo "$OUT"
