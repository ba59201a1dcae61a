package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
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
// not at the sweeper's next round, so the alarm runs well within a second of the index answering.
func TestClusterAlarmListingRetriedSoon(t *testing.T) {
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
		flaky.left = 2
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
		require.Less(t, fs[0].at.Sub(flaky.last), alarmTTL/2, "it ran %v after the last failed listing", fs[0].at.Sub(flaky.last))
		require.Equal(t, 1, runs(t, name, n2))
		n1.rt.Close()
	})
}
