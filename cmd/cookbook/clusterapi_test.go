package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// clusterApp is the workshop as node name of c, advertising addr, without
// calls between the nodes.
func clusterApp(t *testing.T, c *replogtest.MemCluster, name, addr string) (*replogtest.MemNode, http.Handler) {
	t.Helper()
	view, _, h := clusterPeer(t, c, name, addr, false)
	return view, h
}

// clusterPeer is the workshop as node name of c, advertising addr; with
// calls, the nodes carry each other's calls.
func clusterPeer(t *testing.T, c *replogtest.MemCluster, name, addr string, calls bool) (*replogtest.MemNode, *app, http.Handler) {
	t.Helper()
	view := c.Node()
	r := &core.Replication{Node: name, Advertise: addr, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon(), LeaseTTL: 2 * time.Second}
	if calls {
		r.Calls = view.Calls()
	}
	a, h := testApp(t, core.Options{Replication: r})
	return view, a, h
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

// With calls between the nodes, the pattern routes are served at any
// node: a node that does not own the object answers 200 with what the
// owner's method returned (the owner's state, its clock, its analytics
// store), and the objects stay at the owner while it holds them. // S-CL14
func TestAPI_ClusterRoutesServedAtAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		_, a1, h1 := clusterPeer(t, c, "n1", "http://10.0.0.1:8787", true)
		view2, a2, h2 := clusterPeer(t, c, "n2", "http://10.0.0.2:8787", true)
		var set, got sessionAnswer
		get(t, h1, "/session/touch?id=s1&key=user&value=ada", &set)
		var lim limitResult
		get(t, h1, "/limit?key=k&n=3&limit=5&window=1h", &lim)
		var cnt counterAnswer
		get(t, h1, "/counter/record?link=l&n=2", &cnt)
		get(t, h1, "/room/r", nil)
		time.Sleep(4 * time.Second) // beats heard: n2 knows n1 owns them all

		get(t, h2, "/session/get?id=s1&key=user", &got)
		if got.Value == nil || *got.Value != "ada" || got.Deadline == nil || set.Deadline == nil || *got.Deadline != *set.Deadline {
			t.Fatalf("/session/get at n2: %+v; want n1's value ada and deadline %v", got, set.Deadline)
		}
		if code, body := do(t, h2, "GET", "/session/get?id=s1&key=none", nil); code != http.StatusNotFound || !strings.Contains(string(body), `has no value under \"none\"`) {
			t.Fatalf("/session/get of a missing key at n2: %d %s; want 404", code, body)
		}
		get(t, h2, "/session/touch?id=s1", &got) // four seconds later, by n1's clock
		if got.Deadline == nil || *got.Deadline != *set.Deadline+4000 {
			t.Fatalf("/session/touch at n2: %+v; want the deadline moved 4 s from %d", got, *set.Deadline)
		}
		get(t, h2, "/limit?key=k&n=3&limit=5&window=1h", &lim)
		if lim.Allowed != 2 || lim.Refused != 1 {
			t.Fatalf("/limit at n2 after 3 checks at n1: %+v; want 2 allowed, 1 refused", lim)
		}
		var st struct {
			Offset  *int64
			Members []any
		}
		rec := httptest.NewRecorder()
		h2.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/room/r", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusOK || st.Offset == nil || st.Members == nil {
			t.Fatalf("/room/r at n2: %d %s; want the room's state", rec.Code, rec.Body)
		}
		// The room's WebSockets are accepted at its owner: the answer names it.
		if got := rec.Header().Get(core.OwnerHeader) + " " + rec.Header().Get(core.OwnerAddressHeader); got != "n1 http://10.0.0.1:8787" {
			t.Fatalf("/room/r at n2 names %q; want n1 http://10.0.0.1:8787", got)
		}
		view2.CutCalls(true) // n2 cannot reach n1: a retryable 503
		if code, body := do(t, h2, "GET", "/limit?key=k&n=1&limit=5&window=1h", nil); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "cannot be reached") {
			t.Fatalf("/limit at n2 cut from n1: %d %s; want 503, the owner's node cannot be reached", code, body)
		}
		view2.CutCalls(false)
		get(t, h2, "/counter/record?link=l&n=1", &cnt)
		if cnt.Recorded != 1 || cnt.Total != 3 || cnt.FlushAt == nil {
			t.Fatalf("/counter/record at n2: %+v; want total 3, a flush pending", cnt)
		}
		if n1, n2 := a1.rt.Stats().Cluster.HeldLeases, a2.rt.Stats().Cluster.HeldLeases; n1 == 0 || n2 != 0 {
			t.Fatalf("leases held: n1 %d, n2 %d; want every object still at n1", n1, n2)
		}
		time.Sleep(31 * time.Second) // n1's flush: into n1's analytics store
		get(t, h2, "/counter/stats?link=l", &cnt)
		if cnt.Total != 3 || cnt.FlushAt != nil || len(cnt.Flushed) != 1 || cnt.Flushed[0].Count != 3 {
			t.Fatalf("/counter/stats at n2 after n1's flush: %+v; want 3 flushed, as n1's store holds", cnt)
		}
		get(t, h2, "/session/end?id=s1", nil)
		if code, body := do(t, h1, "GET", "/session/get?id=s1&key=user", nil); code != http.StatusNotFound {
			t.Fatalf("/session/get at n1 after /session/end at n2: %d %s; want 404", code, body)
		}
	})
}
