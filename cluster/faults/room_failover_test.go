//go:build faults

package faults_test

import (
	"flag"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster/faults"
)

var (
	roomKills   = flag.Int("room.kills", 10, "how many times the room's owner is killed")
	roomMembers = flag.Int("room.members", 2, "members of the room per node, each sending")
	roomEvery   = flag.Duration("room.every", 50*time.Millisecond, "how often each member sends a message")
)

// S-CL18: a room with members on every node of three node processes, each member sending, and the
// room's owner SIGKILLed again and again (started again each time): members on the nodes that
// were not killed are never closed; members whose node was killed reconnect to another node and
// resume from their offset; every member ends at the room's last offset with every offset after
// its join, in one order that all members share, and every message acknowledged to its sender is
// at the offset its sender saw. The time from each kill to the first message acknowledged after it
// is reported.
func TestRoomFailover(t *testing.T) {
	rep := faults.RunRoomFailover(t, faults.RoomConfig{Kills: *roomKills, Members: *roomMembers, Every: *roomEvery})
	t.Logf("room failover:\n%s", rep.Table())
	if len(rep.Kills) != *roomKills || rep.Acked == 0 {
		t.Fatalf("room failover: %d kills, %d messages acknowledged", len(rep.Kills), rep.Acked)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}
