package bench

import (
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
	"github.com/durable-go/durable/replog/replogtest"
)

// BenchmarkRoomFanoutRelayed is BenchmarkRoomFanout in cluster mode, two nodes over the in-memory
// engine (one shard, owned by n1): with every client connected to the room's node (edge=owner)
// and with every client connected to the other node (edge=other), whose messages go to the owner
// and the room's sends come back through Replication.Calls. Compare the two in one run:
//
//	go test -run '^$' -bench 'RoomFanoutRelayed' -count 5 ./bench
func BenchmarkRoomFanoutRelayed(b *testing.B) {
	for _, n := range []int{2, 100} {
		for _, edge := range []string{"owner", "other"} {
			b.Run("clients="+strconv.Itoa(n)+"/edge="+edge, func(b *testing.B) {
				raiseFileLimit(b, 2*n+256)
				c := replogtest.NewMemCluster().WithShards(1)
				var urls []string
				var rts []*core.Runtime
				for _, name := range []string{"n1", "n2"} {
					view := c.Node()
					rt := roomOpen(b, core.Options{Synchronous: "NORMAL", Logger: slog.New(slog.DiscardHandler),
						Replication: &core.Replication{Node: name, Log: view.Log(), Leases: view.Leases(),
							Beacon: view.Beacon(), Calls: view.Calls(), LeaseTTL: 30 * time.Second}})
					rooms, err := room.Register(rt, "rooms", room.Options{})
					if err != nil {
						b.Fatal(err)
					}
					srv := httptest.NewServer(room.Handler(rooms))
					defer srv.Close()
					rts = append(rts, rt)
					urls = append(urls, "ws"+strings.TrimPrefix(srv.URL, "http")+"/room/bench?name=m")
					if name == "n1" { // n1 takes the room's shard first, and keeps it (a long lease time)
						resp, err := srv.Client().Get(srv.URL + "/room/bench")
						if err != nil {
							b.Fatal(err)
						}
						resp.Body.Close()
					}
				}
				url := urls[0]
				if edge == "other" {
					url = urls[1]
				}
				benchFanout(b, n, url)
				if held := rts[1].Stats().Cluster.HeldLeases; held != 0 {
					b.Fatalf("n2 holds %d leases: the room moved", held)
				}
				for _, rt := range rts {
					roomClose(b, rt)
				}
			})
		}
	}
}
