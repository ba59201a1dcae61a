package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// clusterApp is the workshop as node name of c, advertising addr.
func clusterApp(t *testing.T, c *replogtest.MemCluster, name, addr string) (*replogtest.MemNode, http.Handler) {
	t.Helper()
	view := c.Node()
	_, h := testApp(t, core.Options{Replication: &core.Replication{Node: name, Advertise: addr,
		Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(), LeaseTTL: 2 * time.Second}})
	return view, h
}

// In cluster mode, a call for an object another node owns answers 421 in
// JSON naming the owner and its address, in the body and the headers; GET
// /api/cluster lists the members with their addresses and each shard's
// owner, and shows the shards move when a node falls silent. // S-CL4, S-CL12
func TestAPI_ClusterNamesTheOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		view1, h1 := clusterApp(t, c, "n1", "http://10.0.0.1:8787")
		_, h2 := clusterApp(t, c, "n2", "http://10.0.0.2:8787")
		get(t, h1, "/session/touch?id=s1&key=user&value=ada", nil)
		time.Sleep(4 * time.Second) // beats heard, both nodes settled

		rec := httptest.NewRecorder()
		h2.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/session/get?id=s1&key=user", nil))
		var refusal errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &refusal); err != nil {
			t.Fatalf("%v in %s", err, rec.Body)
		}
		if rec.Code != http.StatusMisdirectedRequest || refusal.Owner != "n1" || refusal.OwnerAddress != "http://10.0.0.1:8787" {
			t.Fatalf("n2 while n1 owns the session: %d %+v; want 421 naming n1 at http://10.0.0.1:8787", rec.Code, refusal)
		}
		if got, want := rec.Header().Get(core.OwnerHeader)+" "+rec.Header().Get(core.OwnerAddressHeader), "n1 http://10.0.0.1:8787"; got != want {
			t.Errorf("the 421's owner headers: %q, want %q", got, want)
		}

		var v clusterView
		get(t, h2, "/api/cluster", &v)
		shard := -1
		for _, s := range v.Shards {
			if s.Owner == "n1" {
				shard = s.Shard
				if s.Address != "http://10.0.0.1:8787" {
					t.Errorf("shard %d: %+v; want n1's address", s.Shard, s)
				}
			} else if s.Owner != "" {
				t.Errorf("shard %d: %+v; only n1 holds a shard", s.Shard, s)
			}
		}
		if !v.ClusterMode || v.Node != "n2" || !v.Ready || len(v.Shards) != replogtest.MemShards || shard < 0 {
			t.Fatalf("/api/cluster on n2: %+v; want n2, ready, every shard, n1 holding the session's", v)
		}
		want := []clusterMember{
			{Name: "n1", Address: "http://10.0.0.1:8787", Alive: true, Ready: true, Shards: []int{shard}},
			{Name: "n2", Address: "http://10.0.0.2:8787", Alive: true, Ready: true, Shards: []int{}},
		}
		if got, _ := json.Marshal(v.Members); string(got) != string(mustJSON(t, want)) {
			t.Fatalf("/api/cluster's members on n2: %s; want %s", got, mustJSON(t, want))
		}

		// n1 falls silent, as if killed: n2 shows it dead and takes its shard.
		view1.CutBeacon(true)
		view1.CutLeases(true)
		time.Sleep(6 * time.Second)
		v = clusterView{}
		get(t, h2, "/api/cluster", &v)
		if v.Shards[shard].Owner != "n2" || v.Shards[shard].Address != "http://10.0.0.2:8787" {
			t.Fatalf("shard %d after n1 fell silent: %+v; want n2", shard, v.Shards[shard])
		}
		if m := v.Members[0]; m.Name != "n1" || m.Alive || m.Ready || len(m.Shards) != 0 {
			t.Fatalf("n1 after it fell silent: %+v; want not alive, holding nothing", m)
		}
		view1.CutBeacon(false)
		view1.CutLeases(false)
	})
}

// Outside cluster mode, GET /api/cluster says so, and nothing else.
func TestAPI_ClusterOutsideClusterMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := testApp(t, core.Options{})
		body := get(t, h, "/api/cluster", nil)
		if got, want := string(body), "{\n  \"clusterMode\": false\n}\n"; got != want {
			t.Fatalf("/api/cluster: %q, want %q", got, want)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
