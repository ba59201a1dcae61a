package cluster_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/internal/loopback"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
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
	err := startFirst(2*n, func(ports []int) error {
		var routes []string
		for i := range n {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
		}
		for i := range n {
			dir, err := os.MkdirTemp(parent, "node")
			if err != nil {
				return err
			}
			c.dirs = append(c.dirs, dir)
			c.cfgs[i] = cluster.NodeConfig{Name: fmt.Sprintf("n%d", i+1), Dir: dir, Port: ports[i]}
			if n > 1 {
				c.cfgs[i].ClusterName, c.cfgs[i].ClusterPort, c.cfgs[i].Routes = "test", ports[n+i], routes
			}
		}
		for i := range n {
			if err := c.start(i); err != nil {
				return err
			}
		}
		return nil
	}, c.shutdown)
	return c, err
}

// startFirst starts servers for the first time on k ports picked now on 127.0.0.1 (start), and if
// a port was taken between its pick and the start (another process listens on it: StartNode fails
// at once with EADDRINUSE), it undoes the start (stopping the servers started, removing their
// directories) and tries again on new ports, a few times.
func startFirst(k int, start func(ports []int) error, undo func()) error {
	var err error
	for range 5 {
		var ports []int
		if ports, err = loopback.FreePorts(k); err != nil {
			return err
		}
		if err = start(ports); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		undo()
	}
	return err
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
	c.dirs = nil
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
// engines returns an engine on each node, all over one prefix of their own.
func (c *testCluster) engines(t *testing.T) []*cluster.Engine {
	t.Helper()
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	es := make([]*cluster.Engine, len(c.nodes))
	for i := range es {
		es[i] = c.engine(t, i, cfg)
	}
	return es
}

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

// S-X1, S-X2, S-X3, S-X10: the engine keeps replog.Log's contract on one node (1 replica).
func TestEngine_LogContract1Node(t *testing.T) {
	c := startCluster(t, 1)
	replogtest.LogContract(t, func(t *testing.T) replog.Log { return c.engine(t, 0, cluster.Config{}) })
}

// S-X4: the engine keeps replog.Leases' contract on one node.
func TestEngine_LeasesContract1Node(t *testing.T) {
	c := startCluster(t, 1)
	replogtest.LeasesContract(t, func(t *testing.T) replog.Leases { return c.engine(t, 0, cluster.Config{Shards: 16}) })
}

// S-X8: the engine keeps replog.Beacon's contract on one node: every engine over the node, of one
// prefix, hears every beat.
func TestEngine_BeaconContract1Node(t *testing.T) {
	c := startCluster(t, 1)
	replogtest.BeaconContract(t, func(t *testing.T, n int) []replog.Beacon { return c.beacons(t, n) })
}

// beacons returns n engines of one prefix, over connections to the nodes in turn.
func (c *testCluster) beacons(t *testing.T, n int) []replog.Beacon {
	t.Helper()
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	bs := make([]replog.Beacon, n)
	for i := range bs {
		bs[i] = c.engine(t, i%len(c.nodes), cfg)
	}
	return bs
}

// A shard's stream keeps one message per lease, however often it is written, and a blob's
// messages once it is replaced or deleted are its manifest and its own chunks, no older ones.
func TestEngine_LeaseAndBlobKeepNoOldMessages(t *testing.T) {
	c := startCluster(t, 1)
	e := c.engine(t, 0, cluster.Config{Prefix: "lay"})
	ctx := t.Context()
	js, err := jetstream.New(c.conn(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	count := func(stream, filter string) (n uint64) {
		t.Helper()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range info.State.Subjects {
			n += k
		}
		return n
	}
	var rev uint64
	for i := range 20 {
		if rev, err = e.Put(ctx, 2, fmt.Appendf(nil, "renewal %d", i), rev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Delete(ctx, 2, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Put(ctx, 2, []byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	if n := count("lay_log_2", "lay.log.2.lease"); n != 1 {
		t.Fatalf("after 22 writes of a lease its stream keeps %d messages of it; want 1", n)
	}
	key := "counters/x"
	stream := fmt.Sprintf("lay_log_%d", e.ShardOf(key))
	blob := fmt.Sprintf("lay.log.%d.b.%s.", e.ShardOf(key), base64.RawURLEncoding.EncodeToString([]byte("snap")))
	for _, size := range []int{1 << 20, 600 << 10} { // 4 chunks of 256 KiB, then 3
		if err := e.PutBlob(ctx, key, "snap", bytes.NewReader(make([]byte, size))); err != nil {
			t.Fatal(err)
		}
	}
	if m, chunks := count(stream, blob+"m"), count(stream, blob+"c.*"); m != 1 || chunks != 3 {
		t.Fatalf("after a blob was replaced by one of 3 chunks, its stream keeps %d manifests and %d chunks of it; want 1 and 3", m, chunks)
	}
	if err := e.DeleteBlob(ctx, key, "snap"); err != nil {
		t.Fatal(err)
	}
	if n := count(stream, blob+">"); n != 0 {
		t.Fatalf("after DeleteBlob its stream keeps %d messages of the blob; want 0", n)
	}
}

// maxNameLen is core.MaxNameLen
const maxNameLen = 1024

// S-X1: a closed connection is an unknown outcome; bad input is a clear error that appends nothing.
func TestEngine_BadInput(t *testing.T) {
	c := startCluster(t, 1)
	e := c.engine(t, 0, cluster.Config{})
	ctx := t.Context()
	for _, key := range []string{"", string(make([]byte, 64+1+maxNameLen+1))} {
		if _, err := e.Append(ctx, key, 0, []byte("x")); err == nil || errors.Is(err, replog.ErrConflict) || errors.Is(err, replog.ErrUnknown) {
			t.Errorf("Append to a key of %d bytes: %v; want a plain error", len(key), err)
		}
		if err := e.PutBlob(ctx, key, "snap", strings.NewReader("x")); err == nil {
			t.Errorf("PutBlob of a key of %d bytes: nil error", len(key))
		}
	}
	for _, shard := range []int{-1, e.Shards()} {
		if _, err := e.Put(ctx, shard, []byte("x"), 0); err == nil || errors.Is(err, replog.ErrLeaseConflict) {
			t.Errorf("Put to shard %d of %d: %v; want a plain error", shard, e.Shards(), err)
		}
		if _, _, err := e.Get(ctx, shard); err == nil {
			t.Errorf("Get of shard %d of %d: nil error", shard, e.Shards())
		}
	}
	if err := e.Beat(ctx, make([]byte, replog.MaxBeatBytes+1)); err == nil {
		t.Errorf("Beat of MaxBeatBytes+1: nil error")
	}
	big := make([]byte, cluster.MaxRecord+1)
	if _, err := e.Append(ctx, "counters/big", 0, big); err == nil || errors.Is(err, replog.ErrUnknown) {
		t.Fatalf("Append of %d bytes: %v; want a plain error", len(big), err)
	}
	if seq, _, err := e.Last(ctx, "counters/big"); err != nil || seq != 0 {
		t.Fatalf("after a refused oversized append Last = %d, %v; want 0", seq, err)
	}
	// The largest record fits.
	if _, err := e.Append(ctx, "counters/big", 0, big[1:]); err != nil {
		t.Fatalf("Append of MaxRecord bytes: %v", err)
	}
	for _, cfg := range []cluster.Config{{Replicas: 7}, {Shards: -1}, {Prefix: "a.b"}, {Timeout: -1}, {AttemptTimeout: -1}} {
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
	if _, err := e2.Append(ctx, "counters/closed", 0, []byte("x")); !errors.Is(err, replog.ErrUnknown) {
		t.Fatalf("Append over a closed connection: %v; want replog.ErrUnknown", err)
	}
}

// S-X1: every key the runtime makes (a namespace of up to 64 bytes, '/', an object name of up to
// core.MaxNameLen bytes, each byte of it maybe escaped in the subject) is a key of the log, and
// names its snapshots' blobs.
func TestEngine_LongestRuntimeKey(t *testing.T) {
	c := startCluster(t, 1)
	e := c.engine(t, 0, cluster.Config{})
	ctx := t.Context()
	ns := strings.Repeat("n", 64)
	for _, name := range []string{strings.Repeat("a", maxNameLen), strings.Repeat("é", maxNameLen/2)} {
		key := ns + "/" + name
		seq, err := e.Append(ctx, key, 0, []byte("x"))
		if err != nil {
			t.Fatalf("Append to a key of %d bytes: %v", len(key), err)
		}
		if last, rec, err := e.Last(ctx, key); err != nil || last != seq || string(rec) != "x" {
			t.Fatalf("Last of a key of %d bytes: %d, %q, %v; want %d", len(key), last, rec, err, seq)
		}
		blob := key + "/snapshot-0123456789abcdef" // as the runtime names a snapshot
		if err := e.PutBlob(ctx, key, blob, strings.NewReader("db")); err != nil {
			t.Fatalf("PutBlob of a name of %d bytes: %v", len(blob), err)
		}
		var got strings.Builder
		if err := e.GetBlob(ctx, key, blob, &got); err != nil || got.String() != "db" {
			t.Fatalf("GetBlob of a name of %d bytes: %q, %v", len(blob), got.String(), err)
		}
	}
}

// S-X7: New against streams that are there with the engine's settings leaves them
// alone (no request that goes through the JetStream meta leader: one round each, which nodes
// starting together would pay for every stream on every try); it creates only those missing and
// updates only those whose settings differ.
func TestNew_CreatesOnlyWhatIsMissing(t *testing.T) {
	c := startCluster(t, 1)
	nc := c.conn(t, 0)
	ctx := t.Context()
	cfg := cluster.Config{Replicas: 1, Shards: 4, Prefix: "t"}
	if _, err := cluster.New(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	count := streamRequests(t, c, nc)
	steps := []struct {
		name             string
		prepare          func() error
		shards           int
		creates, updates int
	}{
		{name: "all there", shards: 4},
		{name: "four more shards", shards: 8, creates: 4},
		{name: "one shard's settings changed", shards: 8, updates: 1, prepare: func() error {
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			s, err := js.Stream(ctx, "t_log_5")
			if err != nil {
				return err
			}
			scfg := s.CachedInfo().Config
			scfg.MaxMsgsPerSubject = 100
			_, err = js.UpdateStream(ctx, scfg)
			return err
		}},
		{name: "all there again", shards: 8},
	}
	for _, step := range steps {
		if step.prepare != nil {
			if err := step.prepare(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			count()
		}
		cfg.Shards = step.shards
		e, err := cluster.New(ctx, nc, cfg)
		if err != nil {
			t.Fatalf("%s: New: %v", step.name, err)
		}
		if creates, updates := count(); creates != step.creates || updates != step.updates {
			t.Errorf("%s: New sent %d creations and %d updates of streams; want %d and %d", step.name, creates, updates, step.creates, step.updates)
		}
		if _, err := e.Append(ctx, "k/"+step.name, 0, []byte("x")); err != nil {
			t.Fatalf("%s: Append: %v", step.name, err)
		}
	}
	js, _ := jetstream.New(nc)
	if s, err := js.Stream(ctx, "t_log_5"); err != nil || s.CachedInfo().Config.MaxMsgsPerSubject != -1 {
		t.Fatalf("the changed shard after New: %v; want its settings back", err)
	}
}

// streamRequests returns a function that counts the requests to create or update a stream sent
// over nc since its last call, as the server delivered them to a subscriber of its own.
func streamRequests(t *testing.T, c *testCluster, nc *nats.Conn) func() (creates, updates int) {
	t.Helper()
	w := c.conn(t, 0)
	ch := make(chan *nats.Msg, 1024)
	marker := nats.NewInbox()
	for _, subject := range []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", marker} {
		if _, err := w.ChanSubscribe(subject, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() (creates, updates int) {
		t.Helper()
		// The marker comes after every request nc sent before it.
		if err := nc.Publish(marker, nil); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-ch:
				switch {
				case m.Subject == marker:
					return creates, updates
				case strings.HasPrefix(m.Subject, "$JS.API.STREAM.CREATE."):
					creates++
				default:
					updates++
				}
			case <-t.Context().Done():
				t.Fatal("the marker did not come back")
			}
		}
	}
}

// S-X7: a node whose cluster has no quorum (it runs alone; the two others it names are not
// there) makes New wait, saying what it waits for, until its context ends; the error says
// what was not ready.
func TestNew_SaysWhatItWaitsFor(t *testing.T) {
	ports, err := loopback.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, p := range ports[1:] {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	node, err := cluster.StartNode(cluster.NodeConfig{Name: "n1", Dir: t.TempDir(), Port: ports[0],
		ClusterName: "test", ClusterPort: ports[1], Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	nc, err := cluster.Connect([]string{node.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logged []string
	handler := recordHandler(func(r slog.Record) {
		logged = append(logged, r.Message)
		cancel() // once it says it waits, stop it
	})
	_, err = cluster.New(ctx, nc, cluster.Config{Shards: 4, Prefix: "t", Timeout: time.Second, Logger: slog.New(handler)})
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "0 of 4 streams ready") {
		t.Fatalf("New without a quorum: %v; want how many of the 4 are ready, and context.Canceled", err)
	}
	if len(logged) == 0 || !strings.Contains(logged[0], "waiting for JetStream") || !strings.Contains(logged[0], "waiting for stream t_log_0") {
		t.Fatalf("New without a quorum logged %q; want what it waits for", logged)
	}
}

// recordHandler is a slog.Handler that passes each record at Info level and above to a function.
type recordHandler func(slog.Record)

func (recordHandler) Enabled(_ context.Context, l slog.Level) bool    { return l >= slog.LevelInfo }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h recordHandler) WithGroup(string) slog.Handler                 { return h }

// A read's answers are kept in memory that grows with them: a read of a few records allocates
// kilobytes, not the 512 KiB channel of a synchronous subscription per request.
func TestEngine_ReadAllocatesLittle(t *testing.T) {
	c := sharedCluster(t)
	e := c.engine(t, 0, cluster.Config{})
	ctx := t.Context()
	var seq uint64
	for i := range 8 {
		var err error
		if seq, err = e.Append(ctx, "small", seq, fmt.Appendf(nil, "record %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() {
		n := 0
		if err := e.Read(ctx, "small", 0, func(uint64, []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 8 {
			t.Fatalf("read %d records, want 8", n)
		}
	}
	read()
	const reads = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		read()
	}
	runtime.ReadMemStats(&after)
	perRead := (after.TotalAlloc - before.TotalAlloc) / reads
	t.Logf("%d bytes allocated per read (the whole process's allocations, the nodes' included)", perRead)
	if perRead > 256<<10 {
		t.Fatalf("a read of 8 records allocated %d KiB", perRead>>10)
	}
}
