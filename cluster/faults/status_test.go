package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// S-X9: a node process's /readyz answers 503 saying why until its runtime is ready, then 200; and
// /status names the node, the raft groups it leads (a node alone leads every stream of its
// engine) and the owner of each shard that has one.
func TestStatusHandler(t *testing.T) {
	dir := t.TempDir()
	node, err := cluster.StartNode(cluster.NodeConfig{Name: "n1", Dir: dir + "/js"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	nc, err := cluster.Connect([]string{node.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := cluster.New(ctx, nc, cluster.Config{Replicas: 1, Shards: 2, Prefix: "faults"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := core.Open(core.Options{Dir: dir + "/objects", Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: "n1", Log: eng, Leases: eng, Beacon: eng}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	regs, err := RegisterHandler(rt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(statusHandler("n1", node, rt, func() error { return readiness(rt) }, regs))
	defer srv.Close()

	// Ready once the runtime has heard the beats (polled: the node is a real server).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "not ready") || time.Now().After(deadline) {
			t.Fatalf("/readyz: %s %s; want 200 within 30 s, 503 saying why until then", resp.Status, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The registers are served beside it; the write takes the object's shard.
	c := &RuntimeClient{Base: srv.URL, HTTP: srv.Client()}
	if v, err := c.Write(context.Background(), "registers/k0", 0, "a"); err != nil || v != 1 {
		t.Fatalf("a write beside the status: %d, %v; want version 1", v, err)
	}
	resp, err := srv.Client().Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st NodeStatus
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "n1" || st.Ready != "" {
		t.Fatalf("/status: %+v; want n1, ready", st)
	}
	if st.Owners[eng.ShardOf("registers/k0")] != "n1" {
		t.Fatalf("/status: %+v; want n1 owning the shard of registers/k0", st)
	}
	if g := objectGroups("registers/k0", 2); len(g) != 1 || g[0] != fmt.Sprintf("faults_log_%d", eng.ShardOf("registers/k0")) {
		t.Fatalf("objectGroups: %v; want the stream of the engine's shard %d", g, eng.ShardOf("registers/k0"))
	}
	for _, s := range objectGroups("registers/k0", 2) {
		if !slices.Contains(st.Leads, s) {
			t.Fatalf("/status: %+v; want n1 leading %s, the stream of registers/k0", st, s)
		}
	}

	// A node hands its raft leaderships over (alone, it has none to hand).
	resp, err = srv.Client().Post(srv.URL+"/handover", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/handover: %s; want 200", resp.Status)
	}

	// A node that stops says so, and is not ready.
	stopping := httptest.NewServer(statusHandler("n1", node, rt, func() error { return errors.New("faults: the node is stopping") }, regs))
	defer stopping.Close()
	resp, err = stopping.Client().Get(stopping.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "stopping") {
		t.Fatalf("/readyz of a node that stops: %s %s; want 503 saying it stops", resp.Status, b)
	}
}
