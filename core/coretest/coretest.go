// Package coretest helps test objects built on package core, as httptest helps test handlers.
//
// # Testing alarms without waiting
//
// Time-based behaviour (alarms, retries, schedules, idle eviction) is best tested inside a
// testing/synctest bubble: open the runtime inside the bubble, and time.Sleep there advances a fake
// clock at once. The whole 126 s retry ladder of a failing alarm then runs in milliseconds:
//
//	func TestFlush(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			rt := coretest.Open(t, core.Options{})  // inside the bubble
//			ns, _ := core.Register(rt, "counters", NewCounter)
//			stub, _ := ns.Get("link-1")
//			core.Do(ctx, stub, func(ctx context.Context, c *Counter) error { return c.Record(ctx) })
//			time.Sleep(31 * time.Second) // the 30 s alarm fires
//			synctest.Wait()              // and its turn has finished
//			// assert on what the alarm did
//		})
//	}
//
// Rules of the bubble: the runtime must be opened and closed inside it (Open does both), and
// nothing in it may wait on a real network socket (use net.Pipe). Outside a bubble,
// Stub.TriggerAlarm runs an object's pending alarm at once.
package coretest

import (
	"context"
	"testing"

	"github.com/durable-go/durable/core"
)

// Open opens a runtime for the test and closes it when the test ends, failing the test if Close
// fails. With opts.Dir empty the data lives in a private temporary directory.
func Open(tb testing.TB, opts core.Options) *core.Runtime {
	tb.Helper()
	rt, err := core.Open(opts)
	if err != nil {
		tb.Fatalf("coretest: open runtime: %v", err)
	}
	tb.Cleanup(func() {
		if err := rt.Close(); err != nil {
			tb.Errorf("coretest: close runtime: %v", err)
		}
	})
	return rt
}

// Seed writes, in data directory dir, the object name of namespace as an earlier version of its
// code left it: it runs queries (schema and rows, each with Storage.Exec, in one turn) with a
// constructor that does nothing, and closes the runtime. Open dir afterwards with the code under
// test to check that its Storage.Migrate steps take the old data up.
func Seed(tb testing.TB, dir, namespace, name string, queries ...string) {
	tb.Helper()
	rt, err := core.Open(core.Options{Dir: dir})
	if err != nil {
		tb.Fatalf("coretest: seed: %v", err)
	}
	defer func() {
		if err := rt.Close(); err != nil {
			tb.Errorf("coretest: seed: close runtime: %v", err)
		}
	}()
	ns, err := core.Register(rt, namespace, func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
	if err == nil {
		var stub *core.Stub[*core.State]
		if stub, err = ns.Get(name); err == nil {
			err = core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
				for _, q := range queries {
					if _, err := st.Storage().Exec(ctx, q); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err != nil {
		tb.Fatalf("coretest: seed %s/%q: %v", namespace, name, err)
	}
}
