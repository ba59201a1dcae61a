package bench

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/cluster/faults"
	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/internal/loopback"
)

// jsCluster is a JetStream cluster of embedded nodes on 127.0.0.1 in the benchmark's process, each
// with its own directory, fsync on every write (package cluster's setting).
type jsCluster struct {
	b     *testing.B
	cfgs  []cluster.NodeConfig
	nodes []*cluster.Node
}

// startJS starts n nodes, shut down when the benchmark ends.
func startJS(b *testing.B, n int) *jsCluster {
	b.Helper()
	ports, err := loopback.FreePorts(2 * n)
	if err != nil {
		b.Fatal(err)
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	c := &jsCluster{b: b, nodes: make([]*cluster.Node, n)}
	for i := range n {
		c.cfgs = append(c.cfgs, cluster.NodeConfig{Name: fmt.Sprintf("n%d", i+1), Dir: b.TempDir(), Port: ports[i],
			ClusterName: "bench", ClusterPort: ports[n+i], Routes: routes})
	}
	b.Cleanup(func() {
		for i := range c.nodes {
			c.kill(i)
		}
	})
	for i := range n {
		c.start(i)
	}
	return c
}

func (c *jsCluster) start(i int) {
	c.b.Helper()
	node, err := cluster.StartNode(c.cfgs[i])
	if err != nil {
		c.b.Fatal(err)
	}
	c.nodes[i] = node
}

// kill shuts node i's server down, as the loss of its machine does (its directory is kept).
func (c *jsCluster) kill(i int) {
	if c.nodes[i] != nil {
		c.nodes[i].Shutdown()
		c.nodes[i] = nil
	}
}

// jsRuntime is a runtime in cluster mode on one node's JetStream: the engine on a connection to
// that node only, so that when the node goes, the runtime is cut off with it.
type jsRuntime struct {
	rt  *core.Runtime
	nc  *nats.Conn
	eng *cluster.Engine
}

// runtime opens a runtime named after node i over it, R3, with the lease time ttl (0: the default).
func (c *jsCluster) runtime(b *testing.B, i int, ttl time.Duration, edit ...func(*core.Options)) *jsRuntime {
	b.Helper()
	return c.runtimeOn(b, i, cluster.Config{Replicas: 3, Shards: 4, Prefix: "bench"}, ttl, edit...)
}

// runtimeOn is runtime over an engine configured as cfg.
func (c *jsCluster) runtimeOn(b *testing.B, i int, cfg cluster.Config, ttl time.Duration, edit ...func(*core.Options)) *jsRuntime {
	b.Helper()
	nc, err := cluster.Connect([]string{fmt.Sprintf("nats://127.0.0.1:%d", c.cfgs[i].Port)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := cluster.New(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		b.Fatal(err)
	}
	opts := core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour,
		Replication: &core.Replication{Node: c.cfgs[i].Name, Log: eng, Leases: eng, Beacon: eng, LeaseTTL: ttl}}
	for _, e := range edit {
		e(&opts)
	}
	rt, err := core.Open(opts)
	if err != nil {
		nc.Close()
		b.Fatal(err)
	}
	n := &jsRuntime{rt: rt, nc: nc, eng: eng}
	b.Cleanup(n.close)
	return n
}

// close closes the runtime (handing its leases back if its node is there) and its connection.
func (n *jsRuntime) close() {
	if n.rt != nil {
		n.rt.Close()
		n.nc.Close()
		n.rt = nil
	}
}

// BenchmarkClusterWrite is the durable write (a counter increment, BenchmarkReplicaCommit's
// counter) of the single-process runtime (impl=single: SQLite with synchronous FULL) and of a
// runtime in cluster mode (impl=cluster: the same, SQLite kept at FULL, and each commit a record
// appended to a 3-replica JetStream stream, fsync always, on 3 embedded nodes in this process on
// loopback, the runtime on one of them), in the same run: to one object from 1, 16 and 64 callers (group commit:
// one record serves a batch), and spread over 1,000 objects by 64 callers (one record per commit).
// impl=cluster-normal is cluster mode with the local SQLite at synchronous NORMAL, cluster mode's
// default (a runtime on another node): the log holds every acknowledged commit, so the local file
// need not fsync it (SEMANTICS CL6).
func BenchmarkClusterWrite(b *testing.B) {
	js := startJS(b, 3)
	single, err := core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { single.Close() })
	// Two clusters of runtimes over the same JetStream nodes (a prefix each): one runtime alone
	// in each holds every shard, as one owner per name needs.
	clustered := js.runtime(b, 0, 0, func(o *core.Options) { o.Synchronous = "FULL" })
	normal := js.runtimeOn(b, 1, cluster.Config{Replicas: 3, Shards: 4, Prefix: "benchnormal"}, 0,
		func(o *core.Options) { o.Synchronous = "NORMAL" })
	impls := []struct {
		name string
		ns   *core.Namespace[*core.State]
	}{{"single", counterNS(b, single)}, {"cluster", counterNS(b, clustered.rt)}, {"cluster-normal", counterNS(b, normal.rt)}}

	for _, objects := range []int{1, 1000} {
		callerSet := []int{1, 16, 64}
		if objects > 1 {
			callerSet = []int{64}
		}
		// Every object exists and is resident (its lease taken, its epoch opened) before the clock
		// runs.
		stubs := make([][]*core.Stub[*core.State], len(impls))
		for k, impl := range impls {
			for i := range objects {
				s, err := impl.ns.Get(fmt.Sprintf("%s-o%d-%d", impl.name, objects, i)) // one owner per name
				if err != nil {
					b.Fatal(err)
				}
				stubs[k] = append(stubs[k], s)
			}
			if err := each(objects, 16, func(i int) error {
				return retrying(func() error { return core.Do(context.Background(), stubs[k][i], increment) })
			}); err != nil {
				b.Fatal(err)
			}
		}
		for _, callers := range callerSet {
			for k, impl := range impls {
				b.Run(fmt.Sprintf("objects=%d/callers=%d/impl=%s", objects, callers, impl.name), func(b *testing.B) {
					var next atomic.Int64
					runCallers(b, callers, "calls/s", func(ctx context.Context) error {
						return core.Do(ctx, stubs[k][int(next.Add(1))%objects], increment)
					})
				})
			}
		}
	}
}

// retrying calls fn until it succeeds or fails with an error that is not retryable, at most 10
// times: an activation in cluster mode reads the lease and the log through the engine's quorum,
// and under load such a read can time out (ErrLeaseUnproven, retryable).
func retrying(fn func() error) error {
	var err error
	for range 10 {
		if err = fn(); err == nil || !core.IsRetryable(err) {
			return err
		}
	}
	return err
}

// BenchmarkClusterFailover is the time an object takes to serve again once its owner's machine is
// lost without warning. Three node processes (package faults's runtime target: this test binary
// run again, each an embedded JetStream node, fsync on every write, and a runtime in cluster mode
// over it, with the default LeaseTTL, serving a namespace of registers over HTTP on 127.0.0.1).
// Each round, a new object is written 5 times through a client that follows refusals to the owner
// they name (the node that acknowledges them owns it); then the owner is SIGKILLed, so its shards'
// leases lapse and the raft groups it led elect new leaders, and the object's writer goes on writing
// through the other nodes until a write is acknowledged, which must be the 6th version: the 5
// acknowledged before the kill are there. ns/op is the time from the kill to that
// acknowledgement; p50-ms and p99-ms are its median and 99th percentile over the rounds. Outside
// the clock, the killed node is started again and every node must be ready before the next round.
// A round takes several seconds and b.N is the number of kills: run it with -benchtime 10x (about 2
// minutes on 2 cores) and -timeout 10m, not with a time-based -benchtime.
func BenchmarkClusterFailover(b *testing.B) {
	c := faults.StartCluster(b, 3, 16, b.Logf)
	ctx := context.Background()
	var times []time.Duration
	b.ResetTimer()
	for r := 0; r < b.N; r++ {
		b.StopTimer()
		w := c.Writer(fmt.Sprintf("failover-%d", r), time.Minute)
		var last faults.Written
		for range 5 {
			var err error
			if last, err = w.Write(ctx); err != nil {
				b.Fatalf("round %d: %v", r, err)
			}
		}
		owner := last.Node
		b.StartTimer()

		lost := time.Now()
		c.Kill(owner)
		got, err := w.Write(ctx)
		if err != nil {
			b.Fatalf("round %d: the object does not serve again within a minute of the kill of its owner %s: %v", r, owner, err)
		}
		times = append(times, time.Since(lost))
		if got.Version != 6 || got.Node == owner {
			b.Fatalf("round %d: version %d acknowledged by %s after the kill of %s; want version 6 at another node", r, got.Version, got.Node, owner)
		}

		b.StopTimer()
		c.Start(owner)
		c.WaitReady(3 * time.Minute)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(times, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(times, 0.99).Microseconds())/1000, "p99-ms")
}
