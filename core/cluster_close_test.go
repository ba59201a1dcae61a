package core_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL12: a node closed while its takeover of a dead node's shard waits for the shard's stream to
// elect a leader stops at once: Close does not wait out the takeover's read of the lease (up to
// 10 s), so a planned stop during an election stays quick.
func TestClusterCloseEndsATakeoverWaitingForALeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		time.Sleep(3 * clusterTTL) // settled
		name := placedAt(c, "n1", []string{"n1", "n2"}, 1)[0]
		shard := c.ShardOf("kv/" + name)
		require.NoError(t, n1.put(name, "k", "v"))
		synctest.Wait()
		n1.view.CutBeacon(true) // node 1 dies, and its shard's stream loses its leader
		n1.view.CutLeases(true)
		n1.view.CutLog(true)
		c.HoldShard(shard, true)
		defer c.HoldShard(shard, false)
		time.Sleep(2 * clusterTTL) // node 2's takeover of the shard waits for the stream
		synctest.Wait()
		require.Zero(t, n2.rt.Stats().Cluster.HeldLeases, "taken over without a leader")

		start := time.Now()
		require.NoError(t, n2.rt.Close())
		require.Less(t, time.Since(start), clusterTTL/4, "Close waited for the takeover's read of the lease")
		n1.rt.Close()
	})
}
