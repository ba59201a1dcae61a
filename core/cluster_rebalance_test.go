package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog/replogtest"
)

// increment adds one to object name's counter in one turn that lasts hold, and returns the new
// count.
func (n *node) increment(name string, hold time.Duration) (int, error) {
	stub, err := n.ns.Get(name)
	if err != nil {
		return 0, err
	}
	return core.Call(context.Background(), stub, func(ctx context.Context, st *core.State) (int, error) {
		v, _, err := st.Storage().Get(ctx, "count")
		if err != nil {
			return 0, err
		}
		count := 0
		if v != nil {
			count, _ = strconv.Atoi(string(v))
		}
		count++
		time.Sleep(hold)
		return count, st.Storage().Put(ctx, "count", []byte(strconv.Itoa(count)))
	})
}

// testCluster is the nodes of a test cluster by name, as a client sees them: nil while down.
type testCluster struct {
	c     *replogtest.MemCluster
	mu    sync.Mutex
	nodes map[string]*node
	names []string
}

func newTestCluster(c *replogtest.MemCluster) *testCluster {
	return &testCluster{c: c, nodes: map[string]*node{}}
}

func (tc *testCluster) set(name string, n *node) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !slices.Contains(tc.names, name) {
		tc.names = append(tc.names, name)
	}
	tc.nodes[name] = n
}

func (tc *testCluster) node(name string) *node {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.nodes[name]
}

// after returns the node up after name in the order they were added.
func (tc *testCluster) after(name string) string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	i := slices.Index(tc.names, name)
	for k := 1; k <= len(tc.names); k++ {
		next := tc.names[(i+k)%len(tc.names)]
		if tc.nodes[next] != nil {
			return next
		}
	}
	return name
}

// writers runs a writer per object: each increments its object's counter every pause, in turns
// that last hold, at the node it believes serves the object, as a client does: a refusal sends it to the node the
// refusal names, a node that stops to the next one. Every acknowledged count must be the one
// before it plus one (no lost update), every refusal must name another node, and the write after a
// refusal must succeed at the node it named. Anything else is a failure, reported by stop.
type writers struct {
	tc          *testCluster
	pause, hold time.Duration
	stopped     chan struct{}
	once        sync.Once
	wg          sync.WaitGroup
	mu          sync.Mutex
	failures    []string
	acked       map[string]int
	refusals    int
}

func startWriters(t *testing.T, tc *testCluster, names []string, first string, pause, hold time.Duration) *writers {
	w := &writers{tc: tc, pause: pause, hold: hold, stopped: make(chan struct{}), acked: map[string]int{}}
	t.Cleanup(w.halt) // a test that fails stops them too
	for _, name := range names {
		w.wg.Go(func() { w.write(name, first) })
	}
	return w
}

func (w *writers) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
}

func (w *writers) write(name, at string) {
	acked, named, refused := 0, "", 0
	for {
		pause := w.pause
		if refused > 0 {
			pause = max(pause, clusterTTL/64) // a client backs off a little after a refusal
		}
		select {
		case <-w.stopped:
			w.mu.Lock()
			w.acked[name] = acked
			w.mu.Unlock()
			return
		case <-time.After(pause):
		}
		n := w.tc.node(at)
		if n == nil {
			at, named = w.tc.after(at), ""
			continue
		}
		count, err := n.increment(name, w.hold)
		var noe *core.NotOwnerError
		switch {
		case err == nil:
			if count != acked+1 {
				w.fail("%s at %s: count %d after %d acknowledged: an update was lost", name, at, count, acked)
			}
			if named != "" && named != at {
				w.fail("%s: refused naming %s, then served by %s", name, named, at)
			}
			acked, named, refused = count, "", 0
		case errors.As(err, &noe):
			w.mu.Lock()
			w.refusals++
			w.mu.Unlock()
			if noe.Holder == at || noe.Holder == "" {
				w.fail("%s at %s: refused naming %q", name, at, noe.Holder)
			}
			if refused++; refused == 4 {
				w.fail("%s: refused 4 times in a row, the last at %s naming %s", name, at, noe.Holder)
			}
			at, named = noe.Holder, noe.Holder
		case errors.Is(err, core.ErrClosed): // the node stops
			at, named = w.tc.after(at), ""
		default:
			w.fail("%s at %s: %v", name, at, err)
		}
	}
}

// halt stops the writers and waits for them.
func (w *writers) halt() {
	w.once.Do(func() { close(w.stopped) })
	w.wg.Wait()
}

// stop stops the writers and returns each object's acknowledged count.
func (w *writers) stop(t *testing.T) map[string]int {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.failures)
	return w.acked
}

// converged waits, a LeaseTTL/8 at a time for up to bound, until every node of tc's table has
// every shard of names held by the node rendezvous hashing places it at among all the nodes up,
// and returns how long it took.
func converged(t *testing.T, tc *testCluster, names []string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	tc.mu.Lock()
	var up []string
	var nodes []*node
	for _, name := range tc.names {
		if tc.nodes[name] != nil {
			up = append(up, name)
			nodes = append(nodes, tc.nodes[name])
		}
	}
	tc.mu.Unlock()
	var wrong string
	for time.Since(start) <= bound {
		wrong = ""
		for _, n := range nodes {
			owners := n.rt.Stats().Cluster.Owners
			for _, name := range names {
				shard := tc.c.ShardOf("kv/" + name)
				if want := replica.Place(shard, up); owners[shard] != want && wrong == "" {
					wrong = fmt.Sprintf("shard %d is held by %q, not %q", shard, owners[shard], want)
				}
			}
		}
		if wrong == "" {
			return time.Since(start)
		}
		time.Sleep(clusterTTL / 8)
	}
	t.Fatalf("placement did not converge within %v: %s", bound, wrong)
	return 0
}

// S-CL12: a node that comes back gets its share of the shards back: each shard that rendezvous
// hashing places at it is handed over by the node holding it, within a bound (it settles for 2
// LeaseTTL, then at most a few shards per LeaseTTL per node). Throughout, under writers, no call
// fails with anything but a refusal naming the node that then serves it, and no update is lost.
func TestClusterRestartedNodeGetsItsShardsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		tc := newTestCluster(c)
		for _, name := range []string{"n1", "n2", "n3"} {
			n := openNode(t, c, name)
			defer func() { n.rt.Close() }()
			tc.set(name, n)
		}
		time.Sleep(3 * clusterTTL) // settled
		var names []string
		for i := range 32 {
			names = append(names, "w"+strconv.Itoa(i))
		}
		w := startWriters(t, tc, names, "n1", clusterTTL/16, 0)
		converged(t, tc, names, 8*clusterTTL)

		// Node 3 stops (a drain) and its shards go to the others.
		n3 := tc.node("n3")
		tc.set("n3", nil)
		require.NoError(t, n3.rt.Close())
		converged(t, tc, names, 4*clusterTTL)
		held := map[string]int64{}
		for _, name := range []string{"n1", "n2"} {
			held[name] = tc.node(name).rt.Stats().Cluster.HeldLeases
		}

		// It comes back, with an empty directory, under the same name.
		back := openNode(t, c, "n3")
		defer func() { back.rt.Close() }()
		tc.set("n3", back)
		took := converged(t, tc, names, 2*clusterTTL+4*clusterTTL)
		t.Logf("placement converged %v after node 3 came back", took)
		require.NotZero(t, back.rt.Stats().Cluster.HeldLeases, "node 3 holds its share again")
		require.Less(t, tc.node("n1").rt.Stats().Cluster.HeldLeases+tc.node("n2").rt.Stats().Cluster.HeldLeases,
			held["n1"]+held["n2"], "the others gave shards back")

		time.Sleep(clusterTTL)
		acked := w.stop(t)
		require.NotZero(t, w.refusals, "the hand-overs refused calls: the writers followed them")
		for _, name := range names {
			require.NotZero(t, acked[name], "%s was written", name)
			at := replica.Place(c.ShardOf("kv/"+name), []string{"n1", "n2", "n3"})
			v, err := tc.node(at).get(name, "count")
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(acked[name]), v, "%s holds every acknowledged increment", name)
		}
	})
}

// S-CL12: a node hands over at most a few shards per LeaseTTL: a node joining a node that holds
// every shard gets its half over several LeaseTTL, not all at once.
func TestClusterHandOversBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.IdleTimeout = time.Hour }) // resident throughout
		defer n1.rt.Close()
		var names []string
		shards := map[int]bool{}
		for i := 0; len(shards) < replogtest.MemShards; i++ {
			name := "o" + strconv.Itoa(i)
			if s := c.ShardOf("kv/" + name); !shards[s] {
				shards[s] = true
				names = append(names, name)
			}
		}
		for _, name := range names {
			require.NoError(t, n1.put(name, "k", "v"+name))
		}
		require.Equal(t, int64(replogtest.MemShards), n1.rt.Stats().Cluster.HeldLeases)
		owed := 0
		for s := range replogtest.MemShards {
			if replica.Place(s, []string{"n1", "n2"}) == "n2" {
				owed++
			}
		}
		require.Greater(t, owed, 2*2, "node 2 is owed more than two LeaseTTL's worth")

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		var counts []int64 // node 2's shards, every LeaseTTL/8
		start := time.Now()
		for time.Since(start) < 2*clusterTTL+time.Duration(owed)*clusterTTL {
			time.Sleep(clusterTTL / 8)
			counts = append(counts, n2.rt.Stats().Cluster.HeldLeases)
		}
		require.Equal(t, int64(owed), counts[len(counts)-1], "node 2 has its half in the end")
		// Two hand-overs begin per LeaseTTL at most; each ends a moment after it begins, so a
		// LeaseTTL sees at most those begun in it and the two before.
		for i := range counts {
			if j := i + 8; j < len(counts) { // any LeaseTTL
				require.LessOrEqual(t, counts[j]-counts[i], int64(2*2), "shards handed over between %v and %v",
					time.Duration(i+1)*clusterTTL/8, time.Duration(j+1)*clusterTTL/8)
			}
		}
		first, last := slices.IndexFunc(counts, func(c int64) bool { return c > 0 }), slices.Index(counts, int64(owed))
		spread := time.Duration(last-first) * clusterTTL / 8
		require.GreaterOrEqual(t, spread, time.Duration((owed+1)/2-1)*clusterTTL-clusterTTL/4,
			"%d shards, two per LeaseTTL: from the first to the last (less a sample's skew)", owed)
		for _, name := range names { // every object is served where it now belongs
			at := n1
			if replica.Place(c.ShardOf("kv/"+name), []string{"n1", "n2"}) == "n2" {
				at = n2
			}
			v, err := at.get(name, "k")
			require.NoError(t, err)
			require.Equal(t, "v"+name, v)
		}
	})
}

// S-CL12: a node that flaps (up for less than 2 LeaseTTL at a time) draws no shard: the others
// keep theirs. Once it stays up, it gets its share.
func TestClusterFlappingNodeDrawsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		tc := newTestCluster(c)
		for _, name := range []string{"n1", "n2"} {
			n := openNode(t, c, name)
			defer n.rt.Close()
			tc.set(name, n)
		}
		time.Sleep(3 * clusterTTL)
		var names []string
		for i := range 12 {
			names = append(names, "f"+strconv.Itoa(i))
		}
		w := startWriters(t, tc, names, "n1", clusterTTL/8, 0)
		converged(t, tc, names, 8*clusterTTL)
		for range 3 {
			n3 := openNode(t, c, "n3")
			for range 12 { // 1.5 LeaseTTL
				time.Sleep(clusterTTL / 8)
				require.Zero(t, n3.rt.Stats().Cluster.HeldLeases, "a node up for less than 2 LeaseTTL draws nothing")
				for _, name := range []string{"n1", "n2"} {
					for shard, owner := range tc.node(name).rt.Stats().Cluster.Owners {
						require.NotEqual(t, "n3", owner, "%s's table: shard %d", name, shard)
					}
				}
			}
			require.NoError(t, n3.rt.Close())
			time.Sleep(clusterTTL / 2)
		}
		n3 := openNode(t, c, "n3")
		defer n3.rt.Close()
		tc.set("n3", n3)
		converged(t, tc, names, 8*clusterTTL)
		require.NotZero(t, n3.rt.Stats().Cluster.HeldLeases, "once it stays, it gets its share")
		w.stop(t)
	})
}

// S-CL12: a shard whose objects are never idle is handed over all the same: its objects take no new
// turn from the hand-over's start (refused, naming the node it goes to), so they fall idle as their
// turns under way end, and close.
func TestClusterHandOverOfBusyObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		tc := newTestCluster(c)
		n1 := openNode(t, c, "n1")
		defer n1.rt.Close()
		tc.set("n1", n1)
		names := placedAt(c, "n2", []string{"n1", "n2"}, 4)
		// Back to back, each turn LeaseTTL/16 long: the gate is never free when the node looks.
		w := startWriters(t, tc, names, "n1", 0, clusterTTL/16)
		time.Sleep(clusterTTL)
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		tc.set("n2", n2)
		converged(t, tc, names, 2*clusterTTL+2*clusterTTL)
		time.Sleep(clusterTTL)
		acked := w.stop(t)
		for _, name := range names {
			v, err := n2.get(name, "count")
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(acked[name]), v, "%s holds every acknowledged increment", name)
		}
	})
}
