package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// sameShard returns n names of objects of namespace kv that c puts in one shard.
func sameShard(c *replogtest.MemCluster, n int) []string {
	by := map[int][]string{}
	for i := 0; ; i++ {
		name := "s" + strconv.Itoa(i)
		s := c.ShardOf("kv/" + name)
		by[s] = append(by[s], name)
		if len(by[s]) == n {
			return by[s]
		}
	}
}

// placedAt returns n names of objects of namespace kv whose shards c places at node among nodes by
// rendezvous hashing: the shards node keeps once the others have settled (S-CL12).
func placedAt(c *replogtest.MemCluster, node string, nodes []string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		name := "p" + strconv.Itoa(i)
		if replica.Place(c.ShardOf("kv/"+name), nodes) == node {
			out = append(out, name)
		}
	}
	return out
}

// S-CL4: ownership is per shard: the node that holds an object's shard serves every object of the
// shard, and the others are refused for all of them, naming it.
func TestClusterOwnsWholeShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		defer n1.rt.Close()
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		names := sameShard(c, 3)
		require.NoError(t, n1.put(names[0], "k", "v"))
		for _, name := range names[1:] {
			err := n2.put(name, "k", "v")
			require.ErrorIs(t, err, core.ErrNotOwner, "%s is in the shard node 1 holds", name)
			var noe *core.NotOwnerError
			require.ErrorAs(t, err, &noe)
			require.Equal(t, "n1", noe.Holder)
			require.NoError(t, n1.put(name, "k", "v"), "node 1 serves every object of its shard")
		}
		require.Equal(t, int64(1), n1.rt.Stats().Cluster.HeldLeases, "one lease for the shard's three objects")
		require.Equal(t, map[int]string{c.ShardOf("kv/" + names[0]): "n1"}, n2.rt.Stats().Cluster.Owners)
	})
}

// countingLeases counts the reads of the leases.
type countingLeases struct {
	replog.Leases
	gets atomic.Int64
}

func (l *countingLeases) Get(ctx context.Context, shard int) (uint64, []byte, error) {
	l.gets.Add(1)
	return l.Leases.Get(ctx, shard)
}

// S-CL4, S-CL12: a call at a node that does not hold the object's shard, while the holder beats, is refused
// from the node's table in memory: no read of the lease through the engine's quorum, so a paused or
// slow engine does not slow the refusal.
func TestClusterRefusesFromMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		defer n1.rt.Close()
		var counted *countingLeases
		n2 := openNode(t, c, "n2", func(o *core.Options) {
			counted = &countingLeases{Leases: o.Replication.Leases}
			o.Replication.Leases = counted
		})
		defer n2.rt.Close()
		require.NoError(t, n1.put("acct", "k", "v"))
		n2.view.CutLeases(true) // refusals need no engine: node 1's beat named the shard as it took it
		before := counted.gets.Load()
		for range 10 {
			_, err := n2.get("acct", "k")
			var noe *core.NotOwnerError
			require.ErrorAs(t, err, &noe)
			require.Equal(t, "n1", noe.Holder)
		}
		require.Equal(t, before, counted.gets.Load(), "no lease read for a refusal")
	})
}

// S-CL12: a node that stops beating (dead, or cut off) loses its shards to the survivors once their
// leases lapse, without a call: each shard goes to the survivor that rendezvous hashing picks, so a
// dead node's shards spread over all of them. A call at any survivor then finds the shard held.
func TestClusterDeadNodesShardsTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		n3 := openNode(t, c, "n3")
		defer n3.rt.Close()
		time.Sleep(3 * clusterTTL) // the survivors have settled
		// Objects whose shards node 1 keeps while all three are up (it hands the others over).
		names := placedAt(c, "n1", []string{"n1", "n2", "n3"}, 40)
		shards := map[int]bool{}
		for _, name := range names {
			require.NoError(t, n1.put(name, "k", "v"+name))
			shards[c.ShardOf("kv/"+name)] = true
		}
		require.Equal(t, int64(len(shards)), n1.rt.Stats().Cluster.HeldLeases)

		// Node 1 dies: no beats, no renewals, no appends.
		n1.view.CutBeacon(true)
		n1.view.CutLeases(true)
		n1.view.CutLog(true)
		time.Sleep(clusterTTL + clusterTTL/2)
		h2, h3 := n2.rt.Stats().Cluster.HeldLeases, n3.rt.Stats().Cluster.HeldLeases
		require.Equal(t, int64(len(shards)), h2+h3, "every shard of node 1's is taken over within 1.5 LeaseTTL")
		require.NotZero(t, h2, "spread over the survivors")
		require.NotZero(t, h3, "spread over the survivors")
		for _, name := range names {
			v, err := n2.get(name, "k")
			if err != nil {
				var noe *core.NotOwnerError
				require.ErrorAs(t, err, &noe)
				require.Equal(t, "n3", noe.Holder, "node 2 names the survivor holding %s's shard", name)
				v, err = n3.get(name, "k")
			}
			require.NoError(t, err)
			require.Equal(t, "v"+name, v)
		}
		n1.rt.Close()
	})
}

// S-CL12: a node that shuts down drains: it takes no shard from then on, refusing with the name of
// the node that should serve instead, its readiness says so, and each shard's lease goes back as
// the shard's last object is evicted, so another node takes it at once.
func TestClusterShutdownDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		time.Sleep(3 * clusterTTL)
		require.NoError(t, n1.rt.Stats().Cluster.Ready)
		require.NoError(t, n2.rt.Stats().Cluster.Ready)
		require.Equal(t, int64(2), n2.rt.Stats().Cluster.Members)
		require.NoError(t, n1.put("acct", "k", "v"))
		require.NoError(t, n1.rt.Shutdown(context.Background()))
		require.Equal(t, int64(1), n2.rt.Stats().Cluster.Members, "a closed node says it is gone")
		start := time.Now()
		v, err := n2.get("acct", "k")
		require.NoError(t, err)
		require.Equal(t, "v", v)
		require.Zero(t, time.Since(start), "taken at once: the lease was handed back")
	})
}

// S-CL12: a node is not ready until its engine has answered, and says why.
func TestClusterReadiness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		view := c.Node()
		view.CutLeases(true)
		n := openNode(t, c, "n1", func(o *core.Options) {
			o.Replication.Leases = view.Leases()
		})
		defer n.rt.Close()
		time.Sleep(clusterTTL)
		err := n.rt.Stats().Cluster.Ready
		require.Error(t, err)
		require.Contains(t, err.Error(), "engine")
		view.CutLeases(false)
		time.Sleep(clusterTTL / 2)
		require.NoError(t, n.rt.Stats().Cluster.Ready)
	})
}

// S-CL4, S-CL12: a shutdown drains in order: the commits under way finish first, under the lease,
// and only then is the lease handed back. Meanwhile another node is refused, naming this one; then
// it takes the shard at once and reads what the last turn committed.
func TestClusterShutdownCommitsBeforeHandingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		require.NoError(t, n1.put("acct", "k", "before"))
		stub, err := n1.ns.Get("acct")
		require.NoError(t, err)
		release, done := make(chan struct{}), make(chan error, 1)
		var freed sync.Once
		free := func() { freed.Do(func() { close(release) }) }
		t.Cleanup(free) // a failed assertion ends the turn too
		go func() {
			done <- core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
				if err := st.Storage().Put(ctx, "k", []byte("last")); err != nil {
					return err
				}
				<-release // a turn under way as the shutdown begins
				return nil
			})
		}()
		synctest.Wait()
		shut := make(chan error, 1)
		go func() { shut <- n1.rt.Shutdown(context.Background()) }()
		synctest.Wait()
		_, err = n2.get("acct", "k")
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe, "node 1 holds the shard while its turn is under way")
		require.Equal(t, "n1", noe.Holder)

		free()
		require.NoError(t, <-done, "the turn under way commits")
		require.NoError(t, <-shut)
		start := time.Now()
		v, err := n2.get("acct", "k")
		require.NoError(t, err)
		require.Equal(t, "last", v)
		require.Zero(t, time.Since(start), "the lease was handed back: taken at once")
	})
}

// slowGets is a node's leases whose every Get of shard's lease takes delay once armed, as a read
// through a stream that elects a new leader does. The other shards' streams answer at once: were
// every read slow, the node would rightly turn unready (its engine not answering within LeaseTTL)
// and take no dead node's shard until a read came back.
type slowGets struct {
	replog.Leases
	shard atomic.Int64
	delay atomic.Int64
}

func (l *slowGets) Get(ctx context.Context, shard int) (uint64, []byte, error) {
	if int64(shard) == l.shard.Load() {
		time.Sleep(time.Duration(l.delay.Load()))
	}
	return l.Leases.Get(ctx, shard)
}

// S-CL4, S-CL12: a dead node's shard is taken over as soon as the survivor's read of its lease
// comes back, though that read took longer than the survivor remembers an unheard lease: the lease
// was seen unrenewed since before the read, and its revision is unchanged, so there is no second
// LeaseTTL to wait and no second read.
func TestClusterSlowTakeoverReadCountsFromTheLastRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		var slow *slowGets
		n2 := openNode(t, c, "n2", func(o *core.Options) {
			slow = &slowGets{Leases: o.Replication.Leases}
			o.Replication.Leases = slow
		})
		defer n2.rt.Close()
		time.Sleep(3 * clusterTTL) // settled
		var name string
		for _, name = range placedAt(c, "n1", []string{"n1", "n2"}, 8) {
			if c.ShardOf("kv/"+name) != 0 { // node 2, holding nothing, learns from shard 0 that its engine answers
				break
			}
		}
		require.NoError(t, n1.put(name, "k", "v"))

		const delay = 6 * time.Second // the survivor forgets a lease unheard for 2 LeaseTTL (8 s)
		slow.shard.Store(int64(c.ShardOf("kv/" + name)))
		slow.delay.Store(int64(delay))
		synctest.Wait()         // node 1's last renewal round has beaten: node 2 knows its revision
		n1.view.CutBeacon(true) // node 1 dies
		n1.view.CutLeases(true)
		n1.view.CutLog(true)
		start := time.Now()
		for n2.rt.Stats().Cluster.HeldLeases == 0 {
			time.Sleep(clusterTTL / 16)
			require.Less(t, time.Since(start), 4*clusterTTL, "node 2 never took the shard over")
		}
		took := time.Since(start)
		require.LessOrEqual(t, took, clusterTTL+delay+clusterTTL/4, "one LeaseTTL after the last renewal, and one read")
		slow.delay.Store(0)
		v, err := n2.get(name, "k")
		require.NoError(t, err)
		require.Equal(t, "v", v)
		n1.rt.Close()
	})
}

// S-CL12: the takeover of a dead node's shard whose stream has no leader (the engine holds its
// calls, as a stream electing one does) waits for it without holding up the takeover of the dead
// node's other shards: each is taken over within 1.5 LeaseTTL all the same.
func TestClusterTakeoverOfALeaderlessShardHoldsUpNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		time.Sleep(3 * clusterTTL) // settled
		// Two objects of node 1's, in two shards; the lower one's stream loses its leader, and the
		// survivor's takeovers go in the order of the shards.
		var names []string
		var shards []int
		for _, name := range placedAt(c, "n1", []string{"n1", "n2"}, 40) {
			if s := c.ShardOf("kv/" + name); len(shards) == 0 || s != shards[0] {
				names, shards = append(names, name), append(shards, s)
			}
			if len(shards) == 2 {
				break
			}
		}
		if shards[0] > shards[1] {
			names[0], names[1], shards[0], shards[1] = names[1], names[0], shards[1], shards[0]
		}
		for _, name := range names {
			require.NoError(t, n1.put(name, "k", "v"+name))
		}
		synctest.Wait()
		n1.view.CutBeacon(true) // node 1 dies
		n1.view.CutLeases(true)
		n1.view.CutLog(true)
		c.HoldShard(shards[0], true)
		time.Sleep(clusterTTL + clusterTTL/2)
		require.Equal(t, int64(1), n2.rt.Stats().Cluster.HeldLeases, "shard %d taken over while shard %d has no leader", shards[1], shards[0])
		v, err := n2.get(names[1], "k")
		require.NoError(t, err)
		require.Equal(t, "v"+names[1], v)

		c.HoldShard(shards[0], false) // elected
		time.Sleep(clusterTTL / 4)
		require.Equal(t, int64(2), n2.rt.Stats().Cluster.HeldLeases, "shard %d taken over once it has a leader", shards[0])
		v, err = n2.get(names[0], "k")
		require.NoError(t, err)
		require.Equal(t, "v"+names[0], v)
		n1.rt.Close()
	})
}

// S-CL12: a shard whose stream has no leader (the engine holds its calls) is not handed over to the
// node it belongs to: the hand-over needs the stream, and would meanwhile refuse the shard's calls
// here, naming a node that cannot take it either. It is handed over once its stream answers.
func TestClusterNoHandOverWhileTheShardHasNoLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		logs := newLogCapture()
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			o.Logger = slog.New(logs)
			o.IdleTimeout = time.Hour // resident throughout: only a hand-over closes it
		})
		defer n1.rt.Close()
		time.Sleep(clusterTTL)
		name := placedAt(c, "n2", []string{"n1", "n2"}, 1)[0] // n2's, once it has joined
		shard := c.ShardOf("kv/" + name)
		require.NoError(t, n1.put(name, "k", "v"))
		synctest.Wait()
		c.HoldShard(shard, true)
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		time.Sleep(4 * clusterTTL) // n2 has settled: the shard belongs to it
		_, handed := logs.find("shard_handover shard=" + strconv.Itoa(shard))
		require.False(t, handed, "no hand-over while the shard's stream has no leader")

		c.HoldShard(shard, false)
		start := time.Now()
		for n2.rt.Stats().Cluster.HeldLeases == 0 {
			time.Sleep(clusterTTL / 16)
			require.Less(t, time.Since(start), 4*clusterTTL, "never handed over once the stream answered")
		}
		v, err := n2.get(name, "k")
		require.NoError(t, err)
		require.Equal(t, "v", v)
	})
}

// lostPuts is a node's leases whose next Put, once armed, gets no answer until its context ends
// (or the test ends: free), as a renewal sent to a stream's leader as it is killed does.
type lostPuts struct {
	replog.Leases
	lose atomic.Int32
	free chan struct{}
}

func (l *lostPuts) Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error) {
	if l.lose.Add(-1) >= 0 {
		select {
		case <-ctx.Done():
		case <-l.free:
		}
		return 0, fmt.Errorf("no answer: %w (%v)", replog.ErrUnknown, ctx.Err())
	}
	return l.Leases.Put(ctx, shard, value, rev)
}

// S-CL4, S-CL12: a renewal that gets no answer (sent to a stream's leader as it died) is given up
// after 2 LeaseTTL, not after the 10 s of an operation, and the next one, sent afresh, proves the
// lease again: the node's beats name the shard again, and the other nodes' tables name it its
// owner, within 2 LeaseTTL and a renewal round. The object's shard is node 1's by placement: one
// of node 2's would be handed over to it as soon as the lease is proven again (S-CL12), and the
// table would name node 2 instead.
func TestClusterLostRenewalGivenUpWithinTwoLeaseTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second // the default: 2 LeaseTTL well under an operation's 10 s
		c := replogtest.NewMemCluster()
		var lost *lostPuts
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			lost = &lostPuts{Leases: o.Replication.Leases, free: make(chan struct{})}
			o.Replication.Leases = lost
			o.Replication.LeaseTTL = ttl
			o.IdleTimeout = time.Hour // resident throughout: its lease stays held
		})
		defer n1.rt.Close()
		n2 := openNode(t, c, "n2", func(o *core.Options) { o.Replication.LeaseTTL = ttl })
		defer n2.rt.Close()
		// Should the test fail while the renewal waits, node 1's Close must not wait for it: a
		// goroutine waiting for the renewal's lock would keep the bubble's clock from moving.
		defer close(lost.free)
		time.Sleep(ttl)
		name := placedAt(c, "n1", []string{"n1", "n2"}, 1)[0]
		require.NoError(t, n1.put(name, "k", "v"))
		shard := c.ShardOf("kv/" + name)
		synctest.Wait()
		armed := time.Now()
		lost.lose.Store(1) // the next renewal gets no answer
		time.Sleep(ttl)
		require.Empty(t, n2.rt.Stats().Cluster.Owners[shard], "the lease cannot be proven: node 1's beats do not name it")
		// The lost renewal is sent at the first round after arming (a quarter LeaseTTL), given up 2
		// LeaseTTL later, and the next is sent at that round or the one after, and beats at once:
		// 2.5 LeaseTTL and a poll at most, against the 10 s an operation may take.
		for n2.rt.Stats().Cluster.Owners[shard] != "n1" {
			time.Sleep(ttl / 16)
			require.LessOrEqual(t, time.Since(armed), 3*ttl, "the lost renewal is given up after 2 LeaseTTL, and the next renews the lease")
		}
		v, err := n1.get(name, "k")
		require.NoError(t, err)
		require.Equal(t, "v", v)
	})
}
