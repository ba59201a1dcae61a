package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared3 != nil {
		shared3.shutdown()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared3 is a 3-node cluster the tests that do not stop nodes share (a cluster takes seconds to
// elect its first leader); each of them uses engines with a prefix of its own.
var (
	shared3     *testCluster
	shared3Once sync.Once
	shared3Err  error
)

func sharedCluster(t *testing.T) *testCluster {
	t.Helper()
	shared3Once.Do(func() {
		shared3, shared3Err = newCluster(3, os.TempDir())
	})
	if shared3Err != nil {
		t.Fatalf("start the shared cluster: %v", shared3Err)
	}
	return shared3
}

// testCluster is n embedded nodes on 127.0.0.1, each with its own directory, shut down when the
// test ends.
type testCluster struct {
	dirs  []string
	cfgs  []cluster.NodeConfig
	nodes []*cluster.Node
}

func startCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	c, err := newCluster(n, t.TempDir())
	if c != nil {
		t.Cleanup(c.shutdown)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newCluster starts n nodes with directories under parent.
func newCluster(n int, parent string) (*testCluster, error) {
	c := &testCluster{cfgs: make([]cluster.NodeConfig, n), nodes: make([]*cluster.Node, n)}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		dir, err := os.MkdirTemp(parent, "node")
		if err != nil {
			return c, err
		}
		c.dirs = append(c.dirs, dir)
		c.cfgs[i] = cluster.NodeConfig{Name: fmt.Sprintf("n%d", i+1), Dir: dir, Port: ports[i]}
		if n > 1 {
			c.cfgs[i].ClusterName, c.cfgs[i].ClusterPort, c.cfgs[i].Routes = "test", ports[n+i], routes
		}
	}
	for i := range n {
		if err := c.start(i); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *testCluster) shutdown() {
	for i, node := range c.nodes {
		if node != nil {
			node.Shutdown()
			c.nodes[i] = nil
		}
	}
	for _, dir := range c.dirs {
		os.RemoveAll(dir)
	}
}

// freePorts returns n ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *testCluster) start(i int) error {
	node, err := cluster.StartNode(c.cfgs[i])
	if err != nil {
		return fmt.Errorf("start node %d: %w", i, err)
	}
	c.nodes[i] = node
	return nil
}

func (c *testCluster) stop(i int) {
	c.nodes[i].Shutdown()
	c.nodes[i] = nil
}

func (c *testCluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.cfgs[i].Port) }

// conn connects to node i, closed when the test ends.
func (c *testCluster) conn(t *testing.T, i int) *nats.Conn {
	t.Helper()
	nc, err := cluster.Connect([]string{c.url(i)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var prefixes atomic.Int64

// engine returns an engine with a prefix of its own over a connection to node i.
func (c *testCluster) engine(t *testing.T, i int, cfg cluster.Config) *cluster.Engine {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("t%d", prefixes.Add(1))
	}
	if cfg.Replicas == 0 && len(c.nodes) == 1 {
		cfg.Replicas = 1
	}
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	e, err := cluster.New(ctx, c.conn(t, i), cfg)
	if err != nil {
		t.Fatalf("cluster.New: %v", err)
	}
	return e
}

// S-X1, S-X2, S-X3: the engine keeps core.Log's contract on one node (1 replica) and on three
// (3 replicas, each engine on a node of its own choosing).
func TestEngine_LogContract(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dNodes", n), func(t *testing.T) {
			c := sharedCluster(t)
			if n == 1 {
				c = startCluster(t, 1)
			}
			coretest.LogContract(t, func(t *testing.T) core.Log { return c.engine(t, rand.IntN(n), cluster.Config{}) })
		})
	}
}

// S-X4: the engine keeps core.Leases' contract on one node and on three.
func TestEngine_LeasesContract(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dNodes", n), func(t *testing.T) {
			c := sharedCluster(t)
			if n == 1 {
				c = startCluster(t, 1)
			}
			coretest.LeasesContract(t, func(t *testing.T) core.Leases { return c.engine(t, rand.IntN(n), cluster.Config{}) })
		})
	}
}

// S-X1: writers on different nodes race on one key: exactly one wins each expected sequence, and
// every node then reads the same records.
func TestEngine_RacingAppendersAcrossNodes(t *testing.T) {
	c := sharedCluster(t)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	var es []*cluster.Engine
	for i := range 3 {
		es = append(es, c.engine(t, i, cluster.Config{Prefix: prefix}))
	}
	ctx := t.Context()
	var last uint64
	for round := range 20 {
		type result struct {
			seq uint64
			err error
		}
		results := make(chan result, 6)
		for w := range 6 {
			go func() {
				seq, err := es[w%3].Append(ctx, "counters/race", last, fmt.Appendf(nil, "%d/%d", round, w))
				results <- result{seq, err}
			}()
		}
		wins := 0
		for range 6 {
			r := <-results
			switch {
			case r.err == nil:
				wins++
				last = r.seq
			case !errors.Is(r.err, core.ErrLogConflict):
				t.Fatalf("round %d: %v; want success or ErrLogConflict", round, r.err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners; want 1", round, wins)
		}
	}
	for i, e := range es {
		n := 0
		if err := e.Read(ctx, "counters/race", 0, func(uint64, []byte) error { n++; return nil }); err != nil || n != 20 {
			t.Fatalf("node %d reads %d records, %v; want 20", i, n, err)
		}
	}
}

// S-X1: an append that cannot reach a quorum (two of three nodes down) is ErrLogUnknown, not a
// conflict; once the nodes are back, Last tells whether it landed, and an append expecting that
// wins.
func TestEngine_UnknownOutcomeWithoutQuorum(t *testing.T) {
	c := startCluster(t, 3)
	e := c.engine(t, 0, cluster.Config{Timeout: 3 * time.Second})
	ctx := t.Context()
	s1, err := e.Append(ctx, "counters/q", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	c.stop(1)
	c.stop(2)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = e.Append(actx, "counters/q", s1, []byte("two"))
	cancel()
	if !errors.Is(err, core.ErrLogUnknown) || errors.Is(err, core.ErrLogConflict) {
		t.Fatalf("Append without a quorum: %v; want ErrLogUnknown", err)
	}
	for _, i := range []int{1, 2} {
		if err := c.start(i); err != nil {
			t.Fatal(err)
		}
	}
	// Poll, within a deadline, until the cluster answers again.
	var seq uint64
	var rec []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		seq, rec, err = e.Last(lctx, "counters/q")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Last after the nodes came back: %v", err)
		}
	}
	if !(seq == s1 && string(rec) == "one") && string(rec) != "two" {
		t.Fatalf("Last after the unknown append = %d, %q; want the first record or the unknown one", seq, rec)
	}
	if _, err := e.Append(ctx, "counters/q", seq, []byte("three")); err != nil {
		t.Fatalf("Append expecting the last record Last returned: %v", err)
	}
}

// S-X1: a closed connection is an unknown outcome; bad input is a clear error that appends nothing.
func TestEngine_BadInput(t *testing.T) {
	c := startCluster(t, 1)
	e := c.engine(t, 0, cluster.Config{})
	ctx := t.Context()
	for _, key := range []string{"", string(make([]byte, 1025))} {
		if _, err := e.Append(ctx, key, 0, []byte("x")); err == nil || errors.Is(err, core.ErrLogConflict) || errors.Is(err, core.ErrLogUnknown) {
			t.Errorf("Append to a key of %d bytes: %v; want a plain error", len(key), err)
		}
		if _, err := e.Put(ctx, key, []byte("x"), 0); err == nil || errors.Is(err, core.ErrLeaseConflict) {
			t.Errorf("Put to a key of %d bytes: %v; want a plain error", len(key), err)
		}
	}
	big := make([]byte, cluster.MaxRecord+1)
	if _, err := e.Append(ctx, "counters/big", 0, big); err == nil || errors.Is(err, core.ErrLogUnknown) {
		t.Fatalf("Append of %d bytes: %v; want a plain error", len(big), err)
	}
	if seq, _, err := e.Last(ctx, "counters/big"); err != nil || seq != 0 {
		t.Fatalf("after a refused oversized append Last = %d, %v; want 0", seq, err)
	}
	// The largest record fits.
	if _, err := e.Append(ctx, "counters/big", 0, big[1:]); err != nil {
		t.Fatalf("Append of MaxRecord bytes: %v", err)
	}
	for _, cfg := range []cluster.Config{{Replicas: 7}, {Shards: -1}, {Prefix: "a.b"}, {Timeout: -1}} {
		if _, err := cluster.New(ctx, c.conn(t, 0), cfg); err == nil {
			t.Errorf("New(%+v): nil error", cfg)
		}
	}
	if _, err := cluster.StartNode(cluster.NodeConfig{Name: "x"}); err == nil {
		t.Errorf("StartNode without a Dir: nil error")
	}
	nc, err := cluster.Connect([]string{c.url(0)})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := cluster.New(ctx, nc, cluster.Config{Replicas: 1, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := e2.Append(ctx, "counters/closed", 0, []byte("x")); !errors.Is(err, core.ErrLogUnknown) {
		t.Fatalf("Append over a closed connection: %v; want ErrLogUnknown", err)
	}
}

// S-X3: a blob far larger than a message (20 MiB, the maximum payload is 8 MiB) is kept whole on
// three replicas.
func TestEngine_BlobLargerThanMaxPayload(t *testing.T) {
	c := sharedCluster(t)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	e0 := c.engine(t, 0, cluster.Config{Prefix: prefix})
	e2 := c.engine(t, 2, cluster.Config{Prefix: prefix})
	blob := make([]byte, 20<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	ctx := t.Context()
	if err := e0.PutBlob(ctx, "snapshots/counters/x", bytes.NewReader(blob)); err != nil {
		t.Fatalf("PutBlob of 20 MiB: %v", err)
	}
	h := sha256.New()
	if err := e2.GetBlob(ctx, "snapshots/counters/x", h); err != nil {
		t.Fatalf("GetBlob on another node: %v", err)
	}
	if want := sha256.Sum256(blob); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("the blob read on another node differs from the one put")
	}
	if err := e2.DeleteBlob(ctx, "snapshots/counters/x"); err != nil {
		t.Fatal(err)
	}
	if err := e0.GetBlob(ctx, "snapshots/counters/x", io.Discard); !errors.Is(err, core.ErrNoObject) {
		t.Fatalf("GetBlob after DeleteBlob on another node: %v; want ErrNoObject", err)
	}
	if err := e0.DeleteBlob(ctx, "snapshots/counters/x"); err != nil {
		t.Fatalf("DeleteBlob of a blob already deleted: %v; want nil", err)
	}
}

// S-X4: a lease written on one node is read on another at once, with the revision it was given.
func TestEngine_LeaseReadYourWritesAcrossNodes(t *testing.T) {
	c := sharedCluster(t)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	var es []*cluster.Engine
	for i := range 3 {
		es = append(es, c.engine(t, i, cluster.Config{Prefix: prefix}))
	}
	ctx := t.Context()
	var rev uint64
	for i := range 30 {
		r, err := es[i%3].Put(ctx, "counters/x", fmt.Appendf(nil, "n%d", i%3), rev)
		if err != nil {
			t.Fatalf("Put %d at %d: %v", i, rev, err)
		}
		got, val, err := es[(i+1)%3].Get(ctx, "counters/x")
		if err != nil || got != r || string(val) != fmt.Sprintf("n%d", i%3) {
			t.Fatalf("Get on the next node after Put %d = %d, %q, %v; want %d, n%d", i, got, val, err, r, i%3)
		}
		rev = r
	}
}

// S-X1, S-X2: a writer alone on its key is never refused, however many reads of the key run
// meanwhile (a read writes a barrier, which must not look like another writer) and however fast
// it appends (JetStream refuses an append while the previous one is still in flight at the leader,
// storing nothing; the engine sends it again).
func TestEngine_NoFalseConflictUnderReads(t *testing.T) {
	c := sharedCluster(t)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	w := c.engine(t, 0, cluster.Config{Prefix: prefix})
	ctx, stop := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	var reads atomic.Int64
	for i := range 4 {
		r := c.engine(t, i%3, cluster.Config{Prefix: prefix})
		readers.Go(func() {
			for ctx.Err() == nil {
				if _, _, err := r.Last(ctx, "counters/solo"); err == nil {
					reads.Add(1)
				}
			}
		})
	}
	var last uint64
	for i := range 300 {
		seq, err := w.Append(t.Context(), "counters/solo", last, fmt.Appendf(nil, "%d", i))
		if err != nil {
			stop()
			readers.Wait()
			t.Fatalf("append %d of the only writer, expecting its own last record %d: %v", i, last, err)
		}
		last = seq
	}
	stop()
	readers.Wait()
	if reads.Load() == 0 {
		t.Fatal("no read ran while the writer appended")
	}
}

// BenchmarkAppend measures acknowledged appends (fsync on every write, 3 replicas on loopback)
// by 1 and 64 writers, each on a key of its own, and Last, which writes a read barrier.
func BenchmarkAppend(b *testing.B) {
	c, err := newCluster(3, b.TempDir())
	if c != nil {
		defer c.shutdown()
	}
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	nc, err := cluster.Connect([]string{c.url(0)})
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	e, err := cluster.New(ctx, nc, cluster.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64 // every goroutine of every round appends to a key of its own
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			if writers == 1 {
				var last uint64
				for b.Loop() {
					seq, err := e.Append(ctx, fmt.Sprintf("bench/1/%d", next.Load()), last, make([]byte, 512))
					if err != nil {
						b.Fatal(err)
					}
					last = seq
				}
				next.Add(1)
				return
			}
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench/%d/%d", writers, next.Add(1))
				var last uint64
				rec := make([]byte, 512)
				for pb.Next() {
					seq, err := e.Append(ctx, key, last, rec)
					if err != nil {
						b.Error(err)
						return
					}
					last = seq
				}
			})
		})
	}
	b.Run("Last", func(b *testing.B) {
		if _, err := e.Append(ctx, "bench/last", 0, []byte("x")); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := e.Last(ctx, "bench/last"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
