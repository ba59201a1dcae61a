package replica

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// A beat names the recently active objects of the shards its node holds, most recent first, a
// bounded number per shard and a bounded number of bytes in all, so that a beat stays within
// replog.MaxBeatBytes whatever the objects' names.
func TestWarmList_BoundedAndMostRecentFirst(t *testing.T) {
	c := replogtest.NewMemCluster()
	n := &Node{cfg: Config{Node: "n1", Log: c.Node().Log()}, logs: map[string]*logState{}}
	long := strings.Repeat("x", 1000) // a long name, as a key may be (replog.MaxKeyLen)
	start := time.Unix(0, 0)
	for i := range 400 {
		lg := &logState{}
		lg.active.Store(start.Add(time.Duration(i) * time.Second).UnixNano())
		n.logs["kv/"+strconv.Itoa(i)+long] = lg
	}
	n.logs["kv/idle"] = &logState{} // resident, never committed to or taken over here: not named
	held := map[int]uint64{}
	for shard := range c.Node().Log().Shards() {
		held[shard] = 1
	}
	msg := beatMsg{Node: "n1", Inc: "0123456789abcdef", Shards: held, Warm: n.warmList(held)}
	b, _ := json.Marshal(msg)
	if len(b) > replog.MaxBeatBytes {
		t.Fatalf("the beat is %d bytes; want at most %d", len(b), replog.MaxBeatBytes)
	}
	named := 0
	for shard, keys := range msg.Warm {
		if len(keys) > warmPerShard {
			t.Errorf("shard %d: %d objects named; want at most %d", shard, len(keys), warmPerShard)
		}
		for i, key := range keys {
			if c.ShardOf(key) != shard {
				t.Errorf("%.10s... named under shard %d, not its own %d", key, shard, c.ShardOf(key))
			}
			if i > 0 && n.logs[key].active.Load() > n.logs[keys[i-1]].active.Load() {
				t.Errorf("shard %d: the objects are not named most recent first", shard)
			}
			if key == "kv/idle" {
				t.Errorf("an object never active here is named")
			}
		}
		named += len(keys)
	}
	if named == 0 {
		t.Fatal("no object named")
	}
	// The most recently active objects are the ones named.
	newest := "kv/399" + long
	if !slices.Contains(msg.Warm[c.ShardOf(newest)], newest) {
		t.Errorf("the most recently active object is not named")
	}
	// Only the shards held are named.
	delete(held, c.ShardOf(newest))
	if got := n.warmList(held)[c.ShardOf(newest)]; len(got) != 0 {
		t.Errorf("a shard not held names %d objects", len(got))
	}
}

// S-CL6: with many shards held, the warm lists alone fit their budget but the beat would not: the
// beat goes out without them (the leases it names are what other nodes need).
func TestEncodeBeat_ManyShardsDropsTheWarmList(t *testing.T) {
	msg := beatMsg{Node: "n1", Inc: "0123456789abcdef", Shards: map[int]uint64{}, Warm: map[int][]string{}}
	for shard := range 1024 {
		msg.Shards[shard] = uint64(1_000_000 + shard)
		if shard < 400 {
			msg.Warm[shard] = []string{"kv/" + strconv.Itoa(shard)}
		}
	}
	b := encodeBeat(msg)
	if len(b) > replog.MaxBeatBytes {
		t.Fatalf("the beat is %d bytes; want at most %d", len(b), replog.MaxBeatBytes)
	}
	var got beatMsg
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Shards) != 1024 || got.Warm != nil {
		t.Errorf("the beat names %d shards and %d warm lists; want 1024 and none", len(got.Shards), len(got.Warm))
	}
	small := beatMsg{Node: "n1", Shards: map[int]uint64{3: 7}, Warm: map[int][]string{3: {"kv/a"}}}
	if err := json.Unmarshal(encodeBeat(small), &got); err != nil || len(got.Warm[3]) != 1 {
		t.Errorf("a small beat lost its warm list: %v, %v", got.Warm, err)
	}
}
