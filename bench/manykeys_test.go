package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/core"
)

// BenchmarkManyKeys measures durable writes spread over 1,000 objects by 64
// callers, each call inserting one row into the next object in turn. Two
// callers rarely meet on one object, so nearly every call is its own commit
// on its own file: the disk's fsync rate across files is the limit, not the
// runtime. Compare BenchmarkBaseline/txn=per-insert/files=1000/callers=64.
//
// The objects are created once, before any timing: RunParallel runs the
// function again for each iteration count it tries.
func BenchmarkManyKeys(b *testing.B) {
	const objects, callers = 1000, 64
	rt := openRuntime(b, core.Options{})
	defer closeRuntime(b, rt)
	stubs := registerTables(b, rt, objects)
	activate(b, stubs)
	b.Run("objects=1000/callers=64", func(b *testing.B) {
		before := rt.Stats().Commits
		var next atomic.Int64
		runCallers(b, callers, "calls/s", func(ctx context.Context) error {
			return core.Do(ctx, stubs[int(next.Add(1))%objects], insertCall)
		})
		b.ReportMetric(float64(rt.Stats().Commits-before)/float64(b.N), "commits/op")
	})
}
