package core_test

import (
	"context"
	"errors"
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

// failedListings is a node's log whose listings of one shard's alarm index fail, while armed, a
// given number of times: the shard's stream still electing a leader when the node takes it.
type failedListings struct {
	replog.Log
	mu    sync.Mutex
	shard int
	left  int       // listings still to fail
	last  time.Time // when the last one failed
}

func (l *failedListings) Alarms(ctx context.Context, shard int, fn func(key string, at time.Time, rev uint64) error) error {
	l.mu.Lock()
	if shard == l.shard && l.left > 0 {
		l.left--
		l.last = time.Now()
		l.mu.Unlock()
		return errors.New("no leader yet")
	}
	l.mu.Unlock()
	return l.Log.Alarms(ctx, shard, fn)
}

// S-CL9: a node takes over a dead node's shard whose alarm is overdue, but its first listings of
// the shard's alarm index fail: the listing is tried again at once (within a fraction of LeaseTTL),
// not at the sweeper's next round, and never more than half a LeaseTTL after the last failure, however
// many there were: the alarm runs well within a second of the index answering.
func TestClusterAlarmListingRetriedSoon(t *testing.T) {
	for _, fails := range []int{2, 6} {
		t.Run(strconv.Itoa(fails)+" failures", func(t *testing.T) { listingRetriedSoon(t, fails) })
	}
}

func listingRetriedSoon(t *testing.T, fails int) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		nodes := []string{"n1", "n2"}
		name := ringerAt(c, "n1", nodes)
		flaky := &failedListings{shard: c.ShardOf("ringers/" + name)}
		n1 := openAlarmNode(t, c, "n1", log)
		n2 := openAlarmNode(t, c, "n2", log, func(o *core.Options) {
			flaky.Log = o.Replication.Log
			o.Replication.Log = flaky
		})
		defer n2.rt.Close()
		time.Sleep(3 * alarmTTL)

		due := time.Now().Add(time.Second)
		n1.setAlarm(t, name, due)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		flaky.mu.Lock()
		flaky.left = fails
		flaky.mu.Unlock()
		n1.kill()

		time.Sleep(20 * time.Second)
		synctest.Wait()
		fs := log.of(name)
		require.Len(t, fs, 1, "the alarm ran once")
		require.Equal(t, "n2", fs[0].node)
		flaky.mu.Lock()
		defer flaky.mu.Unlock()
		require.Zero(t, flaky.left, "the listings failed")
		require.LessOrEqual(t, fs[0].at.Sub(flaky.last), alarmTTL/2, "it ran %v after the last failed listing", fs[0].at.Sub(flaky.last))
		require.Equal(t, 1, runs(t, name, n2))
		n1.rt.Close()
	})
}

// hungListings is a node's log whose listings of one shard's alarm index hang, while armed, until
// the call's context ends: the shard's stream lost its leader and elects none.
type hungListings struct {
	replog.Log
	shard int
	hung  chan struct{} // closed when the first hung listing began
	once  sync.Once
	end   chan struct{} // closed to end the hang
}

func (l *hungListings) Alarms(ctx context.Context, shard int, fn func(key string, at time.Time, rev uint64) error) error {
	if shard == l.shard {
		l.once.Do(func() { close(l.hung) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.end:
			return errors.New("no leader")
		}
	}
	return l.Log.Alarms(ctx, shard, fn)
}

// S-CL9: a node holds a shard whose alarm index cannot be listed (every listing hangs until its
// call gives up), and then takes over a dead node's shards with alarms due: those run at their
// time, as they would without the hung shard; each shard is listed on its own.
func TestClusterAlarmListingOfOneShardDelaysNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		nodes := []string{"n1", "n2"}
		stuck := ringerAt(c, "n2", nodes)
		hung := &hungListings{shard: c.ShardOf("ringers/" + stuck), hung: make(chan struct{}), end: make(chan struct{})}
		n1 := openAlarmNode(t, c, "n1", log)
		n2 := openAlarmNode(t, c, "n2", log, func(o *core.Options) {
			hung.Log = o.Replication.Log
			o.Replication.Log = hung
		})
		defer n2.rt.Close()
		defer close(hung.end)
		time.Sleep(3 * alarmTTL)

		// n1's objects on shards of their own, none the stuck one.
		var names []string
		shards := map[int]bool{hung.shard: true}
		for i := 0; len(names) < 3; i++ {
			name := "session-" + strconv.Itoa(i)
			shard := c.ShardOf("ringers/" + name)
			if replica.Place(shard, nodes) == "n1" && !shards[shard] {
				shards[shard] = true
				names = append(names, name)
			}
		}
		due := time.Now().Add(4 * alarmTTL)
		for _, name := range names {
			n1.setAlarm(t, name, due)
		}
		// n2 takes the stuck shard: its listing hangs.
		require.Equal(t, 0, runs(t, stuck, n2))
		<-hung.hung
		n1.kill()

		time.Sleep(time.Until(due) + 8*alarmTTL)
		synctest.Wait()
		for _, name := range names {
			fs := log.of(name)
			require.Len(t, fs, 1, "%s's alarm ran once", name)
			require.Equal(t, "n2", fs[0].node)
			require.False(t, fs[0].at.Before(due), "%s's alarm ran before its time", name)
			require.Less(t, fs[0].at.Sub(due), alarmTTL/2, "%s's alarm ran %v after its time", name, fs[0].at.Sub(due))
		}
		n1.rt.Close()
	})
}

// hungRaise is a node's log whose writes of one alarm time hang until the call's context ends.
type hungRaise struct {
	replog.Log
	at   time.Time
	hung chan struct{} // closed when the first hung write began
	once sync.Once
	end  chan struct{} // closed to end the hang
}

func (l *hungRaise) SetAlarm(ctx context.Context, key string, at time.Time, rev uint64) (uint64, error) {
	if at.Equal(l.at) {
		l.once.Do(func() { close(l.hung) })
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-l.end:
			return 0, errors.New("no leader")
		}
	}
	return l.Log.SetAlarm(ctx, key, at, rev)
}

// S-CL9: a node's write that makes an entry exact after a commit (the raise of a moved alarm)
// hangs until its call gives up; meanwhile the node takes over a dead node's shards with alarms
// due: those run at their time, since the listings wait for no such write.
func TestClusterAlarmSlowExactWriteDelaysNoListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		log := newFireLog(0)
		nodes := []string{"n1", "n2"}
		raised := time.Now().Add(3 * time.Hour)
		hung := &hungRaise{at: raised, hung: make(chan struct{}), end: make(chan struct{})}
		n1 := openAlarmNode(t, c, "n1", log)
		n2 := openAlarmNode(t, c, "n2", log, func(o *core.Options) {
			hung.Log = o.Replication.Log
			o.Replication.Log = hung
		})
		defer n2.rt.Close()
		defer close(hung.end)
		time.Sleep(3 * alarmTTL)

		mine := ringerAt(c, "n2", nodes)
		var names []string
		for i := 0; len(names) < 3; i++ {
			name := "session-" + strconv.Itoa(i)
			if replica.Place(c.ShardOf("ringers/"+name), nodes) == "n1" {
				names = append(names, name)
			}
		}
		due := time.Now().Add(4 * alarmTTL)
		for _, name := range names {
			n1.setAlarm(t, name, due)
		}
		// n2 moves its object's alarm later: the entry's raise hangs.
		n2.setAlarm(t, mine, time.Now().Add(time.Hour))
		n2.setAlarm(t, mine, raised)
		<-hung.hung
		n1.kill()

		time.Sleep(time.Until(due) + 8*alarmTTL)
		synctest.Wait()
		for _, name := range names {
			fs := log.of(name)
			require.Len(t, fs, 1, "%s's alarm ran once", name)
			require.Equal(t, "n2", fs[0].node)
			require.False(t, fs[0].at.Before(due), "%s's alarm ran before its time", name)
			require.Less(t, fs[0].at.Sub(due), alarmTTL/2, "%s's alarm ran %v after its time", name, fs[0].at.Sub(due))
		}
		n1.rt.Close()
	})
}
