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

// settle is how long the tests let a two-node cluster settle: beats heard,
// both nodes settled, and placement converged (the shard handed to the
// node rendezvous hashing picks, which may be either).
const settle = 12 * time.Second

// ownerOf is the node that holds shard 0 of a one-shard cluster, as
// /api/cluster at h says, and the other of names.
func ownerOf(t *testing.T, h http.Handler, names [2]string) (owner, other int) {
	t.Helper()
	var v clusterView
	get(t, h, "/api/cluster", &v)
	switch v.Shards[0].Owner {
	case names[0]:
		return 0, 1
	case names[1]:
		return 1, 0
	}
	t.Fatalf("shard 0 is held by %q; want one of %v", v.Shards[0].Owner, names)
	return 0, 0
}

// In cluster mode, a call for an object another node owns answers 421 in
// JSON naming the owner and its address, in the body and the headers; GET
// /api/cluster lists the members with their addresses and each shard's
// owner, and shows the shards move when a node falls silent. // S-CL4, S-CL12
func TestAPI_ClusterNamesTheOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster().WithShards(1)
		names := [2]string{"n1", "n2"}
		addrs := [2]string{"http://10.0.0.1:8787", "http://10.0.0.2:8787"}
		var views [2]*replogtest.MemNode
		var hs [2]http.Handler
		for i := range names {
			views[i], hs[i] = clusterApp(t, c, names[i], addrs[i])
		}
		get(t, hs[0], "/session/touch?id=s1&key=user&value=ada", nil)
		time.Sleep(settle)
		o, x := ownerOf(t, hs[0], names)

		rec := httptest.NewRecorder()
		hs[x].ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/session/get?id=s1&key=user", nil))
		var refusal errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &refusal); err != nil {
			t.Fatalf("%v in %s", err, rec.Body)
		}
		if rec.Code != http.StatusMisdirectedRequest || refusal.Owner != names[o] || refusal.OwnerAddress != addrs[o] {
			t.Fatalf("%s while %s owns the session: %d %+v; want 421 naming %s at %s", names[x], names[o], rec.Code, refusal, names[o], addrs[o])
		}
		if got, want := rec.Header().Get(core.OwnerHeader)+" "+rec.Header().Get(core.OwnerAddressHeader), names[o]+" "+addrs[o]; got != want {
			t.Errorf("the 421's owner headers: %q, want %q", got, want)
		}

		var v clusterView
		get(t, hs[x], "/api/cluster", &v)
		if !v.ClusterMode || v.Node != names[x] || !v.Ready || len(v.Shards) != 1 || v.Shards[0].Owner != names[o] || v.Shards[0].Address != addrs[o] {
			t.Fatalf("/api/cluster on %s: %+v; want %s, ready, one shard, %s holding it at %s", names[x], v, names[x], names[o], addrs[o])
		}
		want := make([]clusterMember, 2)
		for i := range names {
			want[i] = clusterMember{Name: names[i], Address: addrs[i], Alive: true, Ready: true, Shards: []int{}}
		}
		want[o].Shards = []int{0}
		if got, _ := json.Marshal(v.Members); string(got) != string(mustJSON(t, want)) {
			t.Fatalf("/api/cluster's members on %s: %s; want %s", names[x], got, mustJSON(t, want))
		}

		// The owner falls silent, as if killed: the other shows it dead and takes its shard.
		views[o].CutBeacon(true)
		views[o].CutLeases(true)
		time.Sleep(6 * time.Second)
		v = clusterView{}
		get(t, hs[x], "/api/cluster", &v)
		if v.Shards[0].Owner != names[x] || v.Shards[0].Address != addrs[x] {
			t.Fatalf("shard 0 after %s fell silent: %+v; want %s", names[o], v.Shards[0], names[x])
		}
		if m := v.Members[o]; m.Name != names[o] || m.Alive || m.Ready || len(m.Shards) != 0 {
			t.Fatalf("%s after it fell silent: %+v; want not alive, holding nothing", names[o], m)
		}
		views[o].CutBeacon(false)
		views[o].CutLeases(false)
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
		c := replogtest.NewMemCluster().WithShards(1)
		names := [2]string{"n1", "n2"}
		addrs := [2]string{"http://10.0.0.1:8787", "http://10.0.0.2:8787"}
		var views [2]*replogtest.MemNode
		var apps [2]*app
		var hs [2]http.Handler
		for i := range names {
			views[i], apps[i], hs[i] = clusterPeer(t, c, names[i], addrs[i], true)
		}
		h1 := hs[0]
		var set, got sessionAnswer
		get(t, h1, "/session/touch?id=s1&key=user&value=ada", &set)
		var lim limitResult
		get(t, h1, "/limit?key=k&n=3&limit=5&window=1h", &lim)
		var cnt counterAnswer
		get(t, h1, "/counter/record?link=l&n=2", &cnt)
		get(t, h1, "/room/r", nil)
		time.Sleep(settle) // beats heard, the shard where placement puts it
		o, x := ownerOf(t, h1, names)
		ho, hx, viewx := hs[o], hs[x], views[x]

		get(t, hx, "/session/get?id=s1&key=user", &got)
		if got.Value == nil || *got.Value != "ada" || got.Deadline == nil || set.Deadline == nil || *got.Deadline != *set.Deadline {
			t.Fatalf("/session/get at the other node: %+v; want the value ada and deadline %v", got, set.Deadline)
		}
		if code, body := do(t, hx, "GET", "/session/get?id=s1&key=none", nil); code != http.StatusNotFound || !strings.Contains(string(body), `has no value under \"none\"`) {
			t.Fatalf("/session/get of a missing key at the other node: %d %s; want 404", code, body)
		}
		get(t, hx, "/session/touch?id=s1", &got) // settle later, by the owner's clock
		if got.Deadline == nil || *got.Deadline != *set.Deadline+settle.Milliseconds() {
			t.Fatalf("/session/touch at the other node: %+v; want the deadline moved by settle from %d", got, *set.Deadline)
		}
		get(t, hx, "/limit?key=k&n=3&limit=5&window=1h", &lim)
		if lim.Allowed != 2 || lim.Refused != 1 {
			t.Fatalf("/limit at the other node after 3 checks at n1: %+v; want 2 allowed, 1 refused", lim)
		}
		var st struct {
			Offset  *int64
			Members []any
		}
		rec := httptest.NewRecorder()
		hx.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/room/r", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusOK || st.Offset == nil || st.Members == nil {
			t.Fatalf("/room/r at the other node: %d %s; want the room's state", rec.Code, rec.Body)
		}
		// The room's WebSockets are accepted at its owner: the answer names it.
		if got := rec.Header().Get(core.OwnerHeader) + " " + rec.Header().Get(core.OwnerAddressHeader); got != names[o]+" "+addrs[o] {
			t.Fatalf("/room/r at %s names %q; want %s %s", names[x], got, names[o], addrs[o])
		}
		viewx.CutCalls(true) // the other node cannot reach the owner: a retryable 503
		if code, body := do(t, hx, "GET", "/limit?key=k&n=1&limit=5&window=1h", nil); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "cannot be reached") {
			t.Fatalf("/limit at the other node, cut from the owner: %d %s; want 503, the owner's node cannot be reached", code, body)
		}
		viewx.CutCalls(false)
		get(t, hx, "/counter/record?link=l&n=1", &cnt)
		if cnt.Recorded != 1 || cnt.Total != 3 || cnt.FlushAt == nil {
			t.Fatalf("/counter/record at the other node: %+v; want total 3, a flush pending", cnt)
		}
		if ln, lx := apps[o].rt.Stats().Cluster.HeldLeases, apps[x].rt.Stats().Cluster.HeldLeases; ln == 0 || lx != 0 {
			t.Fatalf("leases held: owner %s %d, %s %d; want every object still at the owner", names[o], ln, names[x], lx)
		}
		time.Sleep(31 * time.Second) // the owner's flush: into its analytics store
		get(t, hx, "/counter/stats?link=l", &cnt)
		if cnt.Total != 3 || cnt.FlushAt != nil || len(cnt.Flushed) != 1 || cnt.Flushed[0].Count != 3 {
			t.Fatalf("/counter/stats at the other node after n1's flush: %+v; want 3 flushed, as the owner's store holds", cnt)
		}
		get(t, hx, "/session/end?id=s1", nil)
		if code, body := do(t, ho, "GET", "/session/get?id=s1&key=user", nil); code != http.StatusNotFound {
			t.Fatalf("/session/get at the owner after /session/end at the other node: %d %s; want 404", code, body)
		}
	})
}
