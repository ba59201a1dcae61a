package cluster

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// S-CL9, S-X10: a shard's listing of alarm entries answered first by a replica that has not applied
// the listing's read barrier yet (one catching up after a restart or a change of leader: it holds
// none of the shard's entries) is not taken for the listing: a replica is asked again, and the
// entry that the stream held long before the listing is listed.
func TestEngine_AlarmsNotListedFromALaggingReplica(t *testing.T) {
	node, err := StartNode(NodeConfig{Name: "n1", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The stream's replicas are played by one responder on an API prefix of the test's own.
	e := &Engine{nc: nc, cfg: Config{Prefix: "lag", Shards: 1, Timeout: 10 * time.Second, AttemptTimeout: 2 * time.Second}, apiPfx: "TEST.API"}
	const key = "ns/o1"
	at := time.Unix(1_900_000_000, 7)
	stream, subject, barrier, err := e.alarmWhere(key)
	if err != nil {
		t.Fatal(err)
	}
	const entrySeq, barrierSeq = 5, 9
	var asked atomic.Int32
	sub, err := nc.Subscribe("TEST.API.DIRECT.GET."+stream, func(m *nats.Msg) {
		if asked.Add(1) == 1 { // the lagging replica: nothing up to the barrier, not even the barrier
			end := nats.NewMsg(m.Reply)
			end.Header.Set("Status", "404")
			m.RespondMsg(end)
			return
		}
		entry := nats.NewMsg(m.Reply)
		entry.Header.Set("Nats-Subject", subject)
		entry.Header.Set("Nats-Sequence", strconv.Itoa(entrySeq))
		entry.Header.Set(alarmAt, strconv.FormatInt(at.UnixNano(), 10))
		entry.Header.Set(alarmID, "id1")
		mark := nats.NewMsg(m.Reply)
		mark.Header.Set("Nats-Subject", barrier)
		mark.Header.Set("Nats-Sequence", strconv.Itoa(barrierSeq))
		end := nats.NewMsg(m.Reply)
		end.Header.Set("Status", "204")
		for _, r := range []*nats.Msg{entry, mark, end} {
			m.RespondMsg(r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := e.listAlarms(ctx, stream, barrier, []string{e.subjectBase(0) + "a.>"}, barrierSeq)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].key != key || !got[0].at.Equal(at) || got[0].rev != entrySeq {
		t.Fatalf("listed %+v; want %s at %v, revision %d", got, key, at, entrySeq)
	}
	if n := asked.Load(); n < 2 {
		t.Fatalf("the replicas were asked %d times; want the lagging one's answer dropped and another asked", n)
	}
}
