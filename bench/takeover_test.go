package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/internal/rendezvous"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// takeoverTTL is the lease time of BenchmarkTakeoverActivate: short, so that its takeovers are
// quick, long enough that a loaded machine renews in time.
const takeoverTTL = 500 * time.Millisecond

// readCounter counts the records its node reads from the log.
type readCounter struct {
	replog.Log
	read atomic.Int64
}

func (l *readCounter) Read(ctx context.Context, key string, after uint64, fn func(uint64, []byte) error) error {
	return l.Log.Read(ctx, key, after, func(seq uint64, rec []byte) error {
		l.read.Add(1)
		return fn(seq, rec)
	})
}

// takeoverNode is one runtime of BenchmarkTakeoverActivate's cluster.
type takeoverNode struct {
	name  string
	rt    *core.Runtime
	log   *readCounter
	dir   string
	shard int    // the shard of the benchmark's object
	ready func() // waits, before the owner is killed, for what the survivor's engine needs; may be nil
	kill  func() // stops the node as a dead machine stops: no beats, no renewals, no appends
	close func() // closes its runtime, after kill: it hands nothing back
}

func openTakeoverNode(b *testing.B, c *replogtest.MemCluster, name string) *takeoverNode {
	view := c.Node()
	n := &takeoverNode{name: name, dir: b.TempDir()}
	n.log = &readCounter{Log: view.Log()}
	rt, err := core.Open(core.Options{Dir: n.dir, Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: n.log, Leases: view.Leases(), Beacon: view.Beacon(),
			LeaseTTL: takeoverTTL, SnapshotEvery: 1 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	n.rt = rt
	n.kill = func() {
		view.CutBeacon(true)
		view.CutLeases(true)
		view.CutLog(true)
	}
	n.close = func() { rt.Close() }
	n.shard = c.ShardOf("counters/c")
	return n
}

// waitFor polls cond every takeoverTTL/20 for a minute at most.
func waitFor(b *testing.B, what string, cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkTakeoverActivate is the first call to an object after its owner died and a survivor took
// its shard over, for an object whose log holds 1,000 or 10,000 counter increments since its last
// snapshot, over the in-memory engine: with the survivor's file kept warm while the owner lived
// (file=warm: the survivor was the shard's next owner, and caught the file up), and without
// (file=cold: the survivor registers the namespace only after the takeover, so it keeps nothing
// warm, and rebuilds the object from its log). Each round opens a survivor beside the owner, waits
// for it to settle (and, warm, for its file), stops the owner as a dead machine stops, waits for
// the survivor to hold the shard, and times the call; the survivor is the next round's owner. It
// reports the p50 of the calls (p50-ms) and the records the survivor read in them (records/op).
func BenchmarkTakeoverActivate(b *testing.B) {
	for _, records := range []int{1000, 10000} {
		for _, file := range []string{"warm", "cold"} {
			b.Run(fmt.Sprintf("records=%d/file=%s", records, file), func(b *testing.B) {
				c := replogtest.NewMemCluster()
				takeovers(b, records, file, takeoverTTL, func(name string) *takeoverNode {
					return openTakeoverNode(b, c, name)
				})
			})
		}
	}
}

// BenchmarkTakeoverActivateNATS is BenchmarkTakeoverActivate over JetStream: 3 embedded nodes in
// this process (R3, 4 shards, fsync always), each runtime on a connection to one node only, with a
// lease time of 1 s. A round's owner dies with its node (shut down; started again for the next
// round's survivor, which waits 5 s for it to catch its streams up), so the survivor waits for the
// streams that node led to elect a leader before it takes the shard; the timed call comes after.
func BenchmarkTakeoverActivateNATS(b *testing.B) {
	const ttl = time.Second
	for _, records := range []int{1000, 10000} {
		for _, file := range []string{"warm", "cold"} {
			b.Run(fmt.Sprintf("records=%d/file=%s", records, file), func(b *testing.B) {
				js := startJS(b, 3)
				at := 0 // the node of the next runtime: 0 and 1 in turn, node 2 stays up
				takeovers(b, records, file, ttl, func(name string) *takeoverNode {
					i := at
					at = 1 - at
					if js.nodes[i] == nil {
						js.start(i)
					}
					n := &takeoverNode{name: name, dir: b.TempDir(), kill: func() { js.kill(i) }}
					n.ready = func() { // a node started again catches its streams up before it counts in a quorum
						waitFor(b, "the survivor's node's quorum", func() bool { return js.nodes[i].Quorum() == nil })
						time.Sleep(5 * time.Second)
					}
					r := js.runtime(b, i, ttl, func(o *core.Options) {
						o.Dir = n.dir
						o.Replication.Node = name
						o.Replication.SnapshotEvery = 1 << 30
						n.log = &readCounter{Log: o.Replication.Log}
						o.Replication.Log = n.log
					})
					n.rt, n.close, n.shard = r.rt, r.close, r.eng.ShardOf("counters/c")
					return n
				})
			})
		}
	}
}

// takeovers runs BenchmarkTakeoverActivate's rounds over nodes that open opens, named as given, for
// an object whose log holds records increments, its file warm or cold; ttl is their lease time.
func takeovers(b *testing.B, records int, file string, ttl time.Duration, open func(name string) *takeoverNode) {
	ctx := context.Background()
	owner := open("owner")
	shard := owner.shard
	stub, _ := counterNS(b, owner.rt).Get("c")
	for range records {
		if err := core.Do(ctx, stub, increment); err != nil {
			b.Fatal(err)
		}
	}
	var lat []time.Duration
	var read int64
	next := 0
	for b.Loop() {
		b.StopTimer()
		// A survivor that placement does not give the shard while the owner lives (the owner
		// would hand it over): it takes the shard only when the owner dies.
		name := ""
		for name == "" || rendezvous.Place(shard, []string{owner.name, name}) != owner.name {
			next++
			name = fmt.Sprintf("s%d", next)
		}
		s := open(name)
		var ns *core.Namespace[*core.State]
		if file == "warm" {
			ns = counterNS(b, s.rt)
			path := filepath.Join(s.dir, "counters", stubID(b, ns, "c")+".sqlite")
			waitFor(b, "the survivor's warm file", func() bool { _, err := os.Stat(path); return err == nil })
			time.Sleep(ttl) // one more catch-up: the file is at the log's head
		} else {
			time.Sleep(3 * ttl) // settled, as a warm survivor would be
		}
		if s.ready != nil {
			s.ready()
		}
		owner.kill()
		waitFor(b, fmt.Sprintf("the takeover by %s", s.name), func() bool { return s.rt.Stats().Cluster.Owners[shard] == s.name })
		if ns == nil {
			ns = counterNS(b, s.rt)
		}
		stub, _ := ns.Get("c")
		s.log.read.Store(0)
		b.StartTimer()
		start := time.Now()
		got, err := core.Call(ctx, stub, func(ctx context.Context, st *core.State) (int, error) {
			var v int
			err := st.Storage().One(ctx, "SELECT n FROM c").Scan(&v)
			return v, err
		})
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err != nil || got != records {
			b.Fatalf("counter %d, %v; want %d", got, err, records)
		}
		read += s.log.read.Load()
		owner.close()
		owner = s
		b.StartTimer()
	}
	b.StopTimer()
	owner.close()
	b.ReportMetric(float64(percentile(lat, 0.50))/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(read)/float64(len(lat)), "records/op")
}

// stubID returns the ID of the object name of ns: its file's name.
func stubID(b *testing.B, ns *core.Namespace[*core.State], name string) string {
	stub, err := ns.Get(name)
	if err != nil {
		b.Fatal(err)
	}
	return stub.ID()
}
