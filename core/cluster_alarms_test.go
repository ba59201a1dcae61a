package core_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// alarmTTL is the lease time of the tests of alarms in a cluster: the default.
const alarmTTL = time.Second

// fireLog records the alarm runs of a test cluster: which node ran which object's alarm, when.
type fireLog struct {
	mu       sync.Mutex
	fires    []fire
	inFlight map[string]int // by node
	maxIn    map[string]int
	hold     time.Duration // how long each run takes
}

type fire struct {
	node, name string
	at         time.Time
}

func newFireLog(hold time.Duration) *fireLog {
	return &fireLog{inFlight: map[string]int{}, maxIn: map[string]int{}, hold: hold}
}

func (l *fireLog) of(name string) []fire {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []fire
	for _, f := range l.fires {
		if f.name == name {
			out = append(out, f)
		}
	}
	return out
}

// survivors drops the runs of node n1, the one that dies.
func survivors(fs []fire) []fire {
	var out []fire
	for _, f := range fs {
		if f.node != "n1" {
			out = append(out, f)
		}
	}
	return out
}

// ringer is an object whose alarm counts its runs in its storage and tells the fire log.
type ringer struct {
	st   *core.State
	node string
	log  *fireLog
}

func (r *ringer) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	l := r.log
	l.mu.Lock()
	l.inFlight[r.node]++
	l.maxIn[r.node] = max(l.maxIn[r.node], l.inFlight[r.node])
	l.fires = append(l.fires, fire{node: r.node, name: r.st.Name(), at: time.Now()})
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight[r.node]--
		l.mu.Unlock()
	}()
	time.Sleep(l.hold)
	v, _, err := r.st.Storage().Get(ctx, "runs")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(v))
	return r.st.Storage().Put(ctx, "runs", []byte(strconv.Itoa(n+1)))
}

// alarmNode is a node of a test cluster with the ringers registered.
type alarmNode struct {
	*node
	name    string
	ringers *core.Namespace[*ringer]
}

func openAlarmNode(t *testing.T, c *replogtest.MemCluster, name string, log *fireLog, edit ...func(*core.Options)) *alarmNode {
	t.Helper()
	edit = append([]func(*core.Options){func(o *core.Options) { o.Replication.LeaseTTL = alarmTTL }}, edit...)
	n := openNode(t, c, name, edit...)
	ns, err := core.Register(n.rt, "ringers", func(_ context.Context, st *core.State) (*ringer, error) {
		return &ringer{st: st, node: name, log: log}, nil
	})
	require.NoError(t, err)
	return &alarmNode{node: n, name: name, ringers: ns}
}

// ringerAt returns the name of a ringer whose shard c's placement puts at node among nodes.
func ringerAt(c *replogtest.MemCluster, node string, nodes []string) string {
	for i := 0; ; i++ {
		name := "session-" + strconv.Itoa(i)
		if replica.Place(c.ShardOf("ringers/"+name), nodes) == node {
			return name
		}
	}
}

func (n *alarmNode) setAlarm(t *testing.T, name string, at time.Time) {
	t.Helper()
	stub, err := n.ringers.Get(name)
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, r *ringer) error {
		return r.st.SetAlarm(ctx, at)
	}))
}

// setAlarmAnywhere sets the object's alarm at the first of nodes that owns it (or takes it).
func setAlarmAnywhere(t *testing.T, name string, at time.Time, nodes ...*alarmNode) {
	t.Helper()
	for _, n := range nodes {
		stub, err := n.ringers.Get(name)
		require.NoError(t, err)
		err = core.Do(context.Background(), stub, func(ctx context.Context, r *ringer) error { return r.st.SetAlarm(ctx, at) })
		if err == nil {
			return
		}
		require.ErrorIs(t, err, core.ErrNotOwner)
	}
	t.Fatalf("no node serves %s", name)
}

func (n *alarmNode) deleteAlarm(t *testing.T, name string) {
	t.Helper()
	stub, err := n.ringers.Get(name)
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, r *ringer) error {
		return r.st.DeleteAlarm(ctx)
	}))
}

// runs reads the object's count of alarm runs at whichever of nodes owns it.
func runs(t *testing.T, name string, nodes ...*alarmNode) int {
	t.Helper()
	for _, n := range nodes {
		stub, err := n.ringers.Get(name)
		require.NoError(t, err)
		v, err := core.Call(context.Background(), stub, func(ctx context.Context, r *ringer) (string, error) {
			v, _, err := r.st.Storage().Get(ctx, "runs")
			return string(v), err
		})
		if err == nil {
			count, _ := strconv.Atoi(v)
			return count
		}
		require.ErrorIs(t, err, core.ErrNotOwner)
	}
	t.Fatalf("no node serves %s", name)
	return 0
}

// kill stops a node as a dead machine stops: no beats, no renewals, no appends, and no Close.
func (n *alarmNode) kill() {
	n.view.CutBeacon(true)
	n.view.CutLeases(true)
	n.view.CutLog(true)
}

// S-CL9: an alarm armed at node 1 for T+5 s, node 1 dead at T+2 s (no beats, no renewals, no
// Close), nobody calling: it runs at a survivor at its time (the survivors took node 1's shards
// over at about T+3 s, and loaded their alarm indexes), once in the object's storage, never before
// its time. An alarm due before the takeover runs at the takeover; an alarm cleared before the
// death runs nowhere.
func TestClusterAlarmFiresAfterOwnerDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		n1 := openAlarmNode(t, c, "n1", log)
		n2 := openAlarmNode(t, c, "n2", log)
		defer n2.rt.Close()
		n3 := openAlarmNode(t, c, "n3", log)
		defer n3.rt.Close()
		time.Sleep(3 * alarmTTL) // the survivors have settled

		start := time.Now()
		due, early := start.Add(5*time.Second), start.Add(2500*time.Millisecond)
		n1.setAlarm(t, "session", due)
		n1.setAlarm(t, "flush", early)
		n1.setAlarm(t, "cancelled", due)
		n1.deleteAlarm(t, "cancelled")

		time.Sleep(2 * time.Second)
		killed := time.Now()
		n1.kill()

		time.Sleep(30 * time.Second)
		synctest.Wait()
		fs := log.of("session")
		require.Len(t, fs, 1, "the alarm ran once")
		require.NotEqual(t, "n1", fs[0].node, "a survivor ran it")
		require.False(t, fs[0].at.Before(due), "never before its time: ran at T+%v", fs[0].at.Sub(start))
		require.Less(t, fs[0].at.Sub(due), 100*time.Millisecond, "at its time: the survivors held the shard by then; ran at T+%v", fs[0].at.Sub(start))
		require.Equal(t, 1, runs(t, "session", n2, n3), "one run in the object's storage")

		// Node 1 may have begun this one while its lease was still valid (by its clock, until 7/8
		// LeaseTTL after its last renewal): that run's commit could not reach the log.
		fs = survivors(log.of("flush"))
		require.Len(t, fs, 1, "the alarm due before the takeover ran once at a survivor")
		require.False(t, fs[0].at.Before(early))
		require.Less(t, fs[0].at.Sub(killed), 3*alarmTTL, "it ran at the takeover: T+%v", fs[0].at.Sub(start))
		require.Equal(t, 1, runs(t, "flush", n2, n3), "one run in the object's storage")

		require.Empty(t, log.of("cancelled"), "an alarm cleared before the death does not run")
		n1.rt.Close()
	})
}

// S-CL9: the shard of an object with a pending alarm stays its node's after the object is evicted
// (its lease is not handed back), so the alarm still runs when that node dies with nothing of the
// shard resident.
func TestClusterAlarmOfEvictedObjectFiresAfterOwnerDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		idle := func(o *core.Options) { o.IdleTimeout = time.Second }
		n1 := openAlarmNode(t, c, "n1", log, idle)
		n2 := openAlarmNode(t, c, "n2", log, idle)
		defer n2.rt.Close()
		time.Sleep(3 * alarmTTL)

		due := time.Now().Add(time.Minute)
		n1.setAlarm(t, "reminder", due)
		time.Sleep(10 * time.Second) // evicted by now
		synctest.Wait()
		require.Zero(t, n1.rt.Stats().Resident, "the object was evicted")
		require.Equal(t, int64(1), n1.rt.Stats().Cluster.HeldLeases, "its shard is kept for its alarm")
		n1.kill()

		time.Sleep(time.Until(due) + time.Second)
		synctest.Wait()
		fs := log.of("reminder")
		require.Len(t, fs, 1)
		require.Equal(t, "n2", fs[0].node)
		require.False(t, fs[0].at.Before(due))
		n1.rt.Close()
	})
}

// S-CL9: many alarms over many shards, all overdue when their node dies, run at the survivors that
// take the shards over at most Options.AlarmConcurrency at a time on each node (no storm of
// activations), every one of them once.
func TestClusterAlarmsAfterTakeoverBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		const objects, conc = 120, 4
		log := newFireLog(time.Second) // each run takes a second
		bounded := func(o *core.Options) { o.AlarmConcurrency = conc }
		// n1 alone holds every shard; the survivors join, hear it, and before they have settled
		// (so that no shard is handed over to them) it dies.
		n1 := openAlarmNode(t, c, "n1", log, bounded)
		due := time.Now().Add(time.Hour)
		shards := map[int]bool{}
		for i := range objects {
			n1.setAlarm(t, "o"+strconv.Itoa(i), due)
			shards[c.ShardOf("ringers/o"+strconv.Itoa(i))] = true
		}
		require.Greater(t, len(shards), 8, "the objects are spread over the shards")
		n2 := openAlarmNode(t, c, "n2", log, bounded)
		defer n2.rt.Close()
		n3 := openAlarmNode(t, c, "n3", log, bounded)
		defer n3.rt.Close()
		time.Sleep(alarmTTL)
		n1.kill()
		time.Sleep(time.Until(due))
		start := time.Now()
		time.Sleep(time.Hour)
		synctest.Wait()

		last := start
		for i := range objects {
			fs := log.of("o" + strconv.Itoa(i))
			require.Len(t, fs, 1, "o%d's alarm ran once", i)
			require.False(t, fs[0].at.Before(due))
			if fs[0].at.After(last) {
				last = fs[0].at
			}
		}
		log.mu.Lock()
		for node, m := range log.maxIn {
			require.LessOrEqual(t, m, conc, "node %s ran at most AlarmConcurrency alarms at once", node)
		}
		require.NotContains(t, log.maxIn, "n1")
		log.mu.Unlock()
		// Two survivors, conc at a time each, a second a run: no faster than that.
		require.GreaterOrEqual(t, last.Sub(start), time.Duration(objects/(2*conc)-1)*time.Second)
		n1.rt.Close()
	})
}

// S-CL9: every node of the cluster dies (no Close) and the cluster starts again on empty
// directories, under the same names: the alarms that fell due meanwhile run once the new nodes
// have taken the shards over (their old leases, of incarnations that are gone, seen unrenewed for
// LeaseTTL), though nothing calls the objects and no directory holds them.
func TestClusterAlarmsAfterFullRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		names := []string{"n1", "n2", "n3"}
		var old []*alarmNode
		for _, name := range names {
			old = append(old, openAlarmNode(t, c, name, log))
		}
		time.Sleep(3 * alarmTTL)
		due := time.Now().Add(5 * time.Second)
		const objects = 30
		for i := range objects {
			setAlarmAnywhere(t, "o"+strconv.Itoa(i), due, old[i%3], old[(i+1)%3], old[(i+2)%3])
		}
		for _, n := range old {
			n.kill()
		}
		time.Sleep(20 * time.Second) // all overdue
		restart := time.Now()
		var fresh []*alarmNode
		for _, name := range names {
			n := openAlarmNode(t, c, name, log)
			defer n.rt.Close()
			fresh = append(fresh, n)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for i := range objects {
			name := "o" + strconv.Itoa(i)
			fs := log.of(name)
			require.Len(t, fs, 1, "%s's alarm ran once", name)
			require.Less(t, fs[0].at.Sub(restart), 6*alarmTTL, "%s ran %v after the restart", name, fs[0].at.Sub(restart))
			require.Equal(t, 1, runs(t, name, fresh...))
		}
		for _, n := range old {
			n.rt.Close()
		}
	})
}

// heldRemovals is a node's log whose removals of alarm entries wait, while armed, until released:
// a node paused between its commit and the background write that makes its entry exact.
type heldRemovals struct {
	replog.Log
	mu      sync.Mutex
	armed   bool
	release chan struct{}
	err     error // what the held removal got
}

func (l *heldRemovals) SetAlarm(ctx context.Context, key string, at time.Time, rev uint64) (uint64, error) {
	l.mu.Lock()
	held := l.armed && at.IsZero()
	l.mu.Unlock()
	if !held {
		return l.Log.SetAlarm(ctx, key, at, rev)
	}
	<-l.release
	nrev, err := l.Log.SetAlarm(ctx, key, at, rev)
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	return nrev, err
}

// S-CL9: an entry of the alarm index is written by compare-and-set. Node 1 clears an alarm, but
// its removal of the entry is held back (paused) past its death; the node that took the object
// over sets the alarm again, to the very time the entry still holds, so it has nothing to move:
// it writes the entry anyway (it only listed it), and node 1's late removal, at the revision it
// knew, is refused. The alarm stays in the index, and runs when its new owner dies in turn.
func TestClusterAlarmLateRemovalRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		held := &heldRemovals{release: make(chan struct{})}
		n1 := openAlarmNode(t, c, "n1", log, func(o *core.Options) {
			held.Log = o.Replication.Log
			o.Replication.Log = held
		})
		n2 := openAlarmNode(t, c, "n2", log)
		n3 := openAlarmNode(t, c, "n3", log)
		time.Sleep(3 * alarmTTL)

		name := ringerAt(c, "n1", []string{"n1", "n2", "n3"}) // placement leaves it at n1
		due := time.Now().Add(time.Hour)
		n1.setAlarm(t, name, due)
		held.mu.Lock()
		held.armed = true
		held.mu.Unlock()
		n1.deleteAlarm(t, name) // committed; its entry's removal waits
		synctest.Wait()
		n1.view.CutBeacon(true) // node 1 stops renewing and beating, but its log still answers
		n1.view.CutLeases(true)
		time.Sleep(3 * alarmTTL)

		setAlarmAnywhere(t, name, due, n2, n3)
		close(held.release)
		synctest.Wait()
		held.mu.Lock()
		require.ErrorIs(t, held.err, replog.ErrAlarmMoved, "the late removal was refused")
		held.mu.Unlock()
		at, _, err := c.Node().Log().GetAlarm(context.Background(), "ringers/"+name)
		require.NoError(t, err)
		require.True(t, at.Equal(due), "the entry holds the new owner's alarm: %v", at)

		// The new owner dies too: the last node finds the alarm in the index.
		owner, other := n2, n3
		if n2.rt.Stats().Cluster.Owners[c.ShardOf("ringers/"+name)] == "n3" {
			owner, other = n3, n2
		}
		defer other.rt.Close()
		owner.kill()
		time.Sleep(time.Until(due) + time.Second)
		synctest.Wait()
		fs := survivors(log.of(name))
		require.NotEmpty(t, fs, "the alarm ran")
		require.Equal(t, other.name, fs[len(fs)-1].node)
		require.False(t, fs[0].at.Before(due))
		owner.rt.Close()
		n1.rt.Close()
	})
}

// heldRaise is a node's log whose write of one alarm time waits, while armed, until released: the
// background write that makes an entry exact, slow.
type heldRaise struct {
	replog.Log
	mu      sync.Mutex
	at      time.Time // the time whose writes wait
	waiting chan struct{}
	release chan struct{}
}

func (l *heldRaise) SetAlarm(ctx context.Context, key string, at time.Time, rev uint64) (uint64, error) {
	l.mu.Lock()
	held := !l.at.IsZero() && at.Equal(l.at)
	l.mu.Unlock()
	if held {
		close(l.waiting)
		<-l.release
	}
	return l.Log.SetAlarm(ctx, key, at, rev)
}

// S-CL9: a commit that moves an alarm later leaves its entry early and raises it after the commit,
// in the background; a commit that comes while that raise is under way, and moves the alarm back
// (still later than the entry), writes the entry itself, so the slow raise cannot leave it later
// than the alarm. The node dies: the alarm runs at its time at the survivor, not at the raise's.
func TestClusterAlarmSlowRaiseDoesNotDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		held := &heldRaise{waiting: make(chan struct{}), release: make(chan struct{})}
		n1 := openAlarmNode(t, c, "n1", log, func(o *core.Options) {
			held.Log = o.Replication.Log
			o.Replication.Log = held
		})
		n2 := openAlarmNode(t, c, "n2", log)
		defer n2.rt.Close()
		time.Sleep(3 * alarmTTL)

		now := time.Now()
		t1, t2, t3 := now.Add(time.Hour), now.Add(3*time.Hour), now.Add(2*time.Hour)
		name := ringerAt(c, "n1", []string{"n1", "n2"}) // placement leaves it at n1
		n1.setAlarm(t, name, t1)
		held.mu.Lock()
		held.at = t2
		held.mu.Unlock()
		n1.setAlarm(t, name, t2) // the entry stays at t1; its raise to t2 waits
		<-held.waiting
		n1.setAlarm(t, name, t3) // while the raise is under way
		close(held.release)
		synctest.Wait()
		at, _, err := c.Node().Log().GetAlarm(context.Background(), "ringers/"+name)
		require.NoError(t, err)
		require.False(t, at.After(t3), "the entry is at %v, after the alarm's %v", at, t3)

		n1.kill()
		time.Sleep(time.Until(t3) + time.Second)
		synctest.Wait()
		fs := log.of(name)
		require.Len(t, fs, 1)
		require.Equal(t, "n2", fs[0].node)
		require.False(t, fs[0].at.Before(t3))
		require.Less(t, fs[0].at.Sub(t3), time.Second, "it ran at its time, not the slow raise's")
		n1.rt.Close()
	})
}

// S-CL9, S-CL12: a node that shuts down hands its shards back, pending alarms and all; a node that
// stays takes the shards that have alarms (rendezvous hashing names it, and their leases are
// free), though nothing calls their objects, and runs each alarm at its time.
func TestClusterAlarmAfterDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		n1 := openAlarmNode(t, c, "n1", log)
		n2 := openAlarmNode(t, c, "n2", log)
		defer n2.rt.Close()
		time.Sleep(3 * alarmTTL)

		due := time.Now().Add(time.Minute)
		n1.setAlarm(t, "reminder", due)
		require.NoError(t, n1.rt.Close())
		time.Sleep(5 * alarmTTL)
		require.Equal(t, int64(1), n2.rt.Stats().Cluster.HeldLeases, "node 2 took the shard with the alarm, and no other")

		time.Sleep(time.Until(due) + time.Second)
		synctest.Wait()
		fs := log.of("reminder")
		require.Len(t, fs, 1)
		require.Equal(t, "n2", fs[0].node)
		require.False(t, fs[0].at.Before(due))
		require.Less(t, fs[0].at.Sub(due), 100*time.Millisecond)
	})
}

// S-CL9: a node lists the index of the shards it holds again every 4 LeaseTTL, so an entry written
// after it took the shard (by a deposed owner, say) is found; a spurious one, whose object has no
// alarm, runs nothing and is removed.
func TestClusterAlarmSpuriousEntryRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		n1 := openAlarmNode(t, c, "n1", log)
		defer n1.rt.Close()
		n1.setAlarm(t, "x", time.Now().Add(time.Hour))
		n1.deleteAlarm(t, "x") // n1 holds x's shard, and x has no alarm
		synctest.Wait()

		engine := c.Node().Log()
		ctx := context.Background()
		_, rev, err := engine.GetAlarm(ctx, "ringers/x")
		require.NoError(t, err)
		_, err = engine.SetAlarm(ctx, "ringers/x", time.Now().Add(time.Second), rev)
		require.NoError(t, err)

		time.Sleep(4*alarmTTL + 4*alarmTTL)
		synctest.Wait()
		require.Empty(t, log.of("x"), "nothing ran")
		at, _, err := engine.GetAlarm(ctx, "ringers/x")
		require.NoError(t, err)
		require.True(t, at.IsZero(), "the spurious entry was removed; it is at %v", at)
	})
}
