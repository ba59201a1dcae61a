package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// routedNode is a runtime of BenchmarkRoutedCall with its two methods on namespace "routed": read
// returns the counter, write increments it durably.
type routedNode struct {
	rt          *core.Runtime
	ns          *core.Namespace[*core.State]
	read, write func(ctx context.Context, s *core.Stub[*core.State], _ struct{}) (int64, error)
	bare        func(ctx context.Context) error // a bare request-reply to this node, if the transport has one
}

func newRoutedNode(b *testing.B, rt *core.Runtime) *routedNode {
	b.Helper()
	n := &routedNode{rt: rt, ns: counterNS(b, rt)}
	var err error
	n.read, err = core.Define(n.ns, "read", func(ctx context.Context, st *core.State, _ struct{}) (int64, error) {
		var v int64
		err := st.Storage().QueryRow(ctx, "SELECT coalesce(max(n), 0) FROM c").Scan(&v)
		return v, err
	})
	if err != nil {
		b.Fatal(err)
	}
	n.write, err = core.Define(n.ns, "write", func(ctx context.Context, st *core.State, _ struct{}) (int64, error) {
		return 0, increment(ctx, st)
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// latencies keeps the last calls' latencies (a ring, written without a lock) for percentiles.
type latencies struct {
	next atomic.Int64
	ring [1 << 16]atomic.Int64
}

func (l *latencies) add(d time.Duration) {
	l.ring[(l.next.Add(1)-1)%int64(len(l.ring))].Store(int64(d))
}

func (l *latencies) report(b *testing.B) {
	n := min(l.next.Load(), int64(len(l.ring)))
	if n == 0 {
		return
	}
	ds := make([]int64, 0, n)
	for i := range n {
		if d := l.ring[i].Load(); d > 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-us")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e3, "p99-us")
}

// BenchmarkRoutedCall is a method called at the object's owner (impl=local: no encoding, no hop)
// and at another node (impl=routed: JSON argument and result, one request-reply to the owner), in
// the same run, for a read (op=read: one SELECT) and a durable write (op=write: the counter
// increment), from 1, 16 and 64 callers, over the in-memory engine (transport=mem: the hop is a
// goroutine) and over NATS (transport=nats: 3 embedded JetStream nodes on loopback, 3 replicas,
// the two runtimes on different nodes: the hop crosses a route). Over NATS, op=read's impl=bare is the
// floor: a bare request-reply between the two runtimes' connections, answered at once by the
// subscription's callback. p50-us and p99-us are over the last 65,536 calls; turns/commit (op=write)
// is how many turns each of the owner's commits served (group commit), wherever the calls came from.
func BenchmarkRoutedCall(b *testing.B) {
	b.Run("transport=mem", func(b *testing.B) {
		c := replogtest.NewMemCluster()
		open := func(name string) *routedNode {
			v := c.Node()
			rt, err := core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour,
				Replication: &core.Replication{Node: name, Log: v.Log(), Leases: v.Leases(), Beacon: v.Beacon(), Calls: v.Calls()}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { rt.Close() })
			return newRoutedNode(b, rt)
		}
		routedCalls(b, open("n1"), open("n2"))
	})
	b.Run("transport=nats", func(b *testing.B) {
		js := startJS(b, 3)
		withCalls := func(o *core.Options) { o.Replication.Calls = o.Replication.Log.(replog.Calls) }
		on0, on1 := js.runtime(b, 0, 0, withCalls), js.runtime(b, 1, 0, withCalls)
		owner, caller := newRoutedNode(b, on0.rt), newRoutedNode(b, on1.rt)
		// The floor: a bare NATS request-reply between the same two connections, answered at once.
		sub, err := on0.nc.Subscribe("bench.bare", func(m *nats.Msg) { _ = m.Respond(bareReply) })
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sub.Unsubscribe() })
		if err := on0.nc.Flush(); err != nil {
			b.Fatal(err)
		}
		owner.bare = func(ctx context.Context) error {
			_, err := on1.nc.RequestWithContext(ctx, "bench.bare", bareRequest)
			return err
		}
		routedCalls(b, owner, caller)
	})
}

// bareRequest and bareReply are about the size of a routed read's request and reply.
var (
	bareRequest = make([]byte, 120)
	bareReply   = []byte("r42")
)

// routedCalls runs the sub-benchmarks: owner takes the object first, caller then reaches it
// through owner.
func routedCalls(b *testing.B, owner, caller *routedNode) {
	ctx := context.Background()
	at := func(n *routedNode) *core.Stub[*core.State] {
		s, err := n.ns.Get("obj")
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	if err := retrying(func() error { _, err := owner.write(ctx, at(owner), struct{}{}); return err }); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // the caller's table learns the owner from its beat
		_, err := caller.read(ctx, at(caller), struct{}{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, op := range []string{"read", "write"} {
		for _, callers := range []int{1, 16, 64} {
			for _, impl := range []string{"local", "routed", "bare"} {
				n := owner
				if impl == "routed" {
					n = caller
				}
				fn, s := n.read, at(n)
				if op == "write" {
					fn = n.write
				}
				call := func(ctx context.Context) error { _, err := fn(ctx, s, struct{}{}); return err }
				if impl == "bare" {
					if op != "read" || owner.bare == nil {
						continue
					}
					call = owner.bare
				}
				b.Run(fmt.Sprintf("op=%s/callers=%d/impl=%s", op, callers, impl), func(b *testing.B) {
					var lat latencies
					before := owner.rt.Stats()
					runCallers(b, callers, "calls/s", func(ctx context.Context) error {
						start := time.Now()
						err := call(ctx)
						lat.add(time.Since(start))
						return err
					})
					lat.report(b)
					if op == "write" { // the owner's group commit: the writes each of its commits serves
						after := owner.rt.Stats()
						if c := after.Commits - before.Commits; c > 0 {
							b.ReportMetric(float64(after.Turns-before.Turns)/float64(c), "turns/commit")
						}
					}
				})
			}
		}
	}
}
