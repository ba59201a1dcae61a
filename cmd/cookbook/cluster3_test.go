//go:build !race

// The workshop as three nodes of a cluster. Left out of the race detector's
// runs (and run in every other), as package cluster's 3-node tests are:
// nats-server 2.15.2 has a data race of its own in its clustered publish
// path.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/internal/loopback"
)

// Three workshop servers on one machine, each a node of one cluster with
// its own embedded JetStream node: a session written through one node is
// read through the others, the owner answering (a route that cannot run
// elsewhere is refused, 421 naming the owner), and is served by another,
// with the value, once the first one shuts down. That node's directory
// never held the session. // S-CL1, S-CL4, S-CL14
func TestServe_ClusterModeThreeNodes(t *testing.T) {
	ports, err := loopback.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	routes := make([]string, 3)
	for i := range routes {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i])
	}
	base := t.TempDir()
	nodes := map[string]*server{}
	var waits []func() error
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		s, wait := spawnServe(t, "-data", filepath.Join(base, name), "-node", name,
			"-nats-port", strconv.Itoa(ports[i]), "-cluster-port", strconv.Itoa(ports[3+i]),
			"-routes", strings.Join(routes, ","), "-lease", "2s", "-shards", "2")
		nodes[name], waits = s, append(waits, wait)
	}
	// A cluster is ready once a majority of its nodes run: the nodes
	// start together, and each waits for the others.
	for name, wait := range waits {
		if err := wait(); err != nil {
			t.Fatalf("n%d: %v", name+1, err)
		}
	}
	for name, s := range nodes {
		if !strings.Contains(s.out.String(), "cluster mode: node "+name+", serving at http://"+s.addr+";") {
			t.Fatalf("%s's banner does not say it is a node:\n%s", name, s.out.String())
		}
	}

	var s struct{ Value *string }
	nodes["n1"].get(t, "/session/touch?id=c1&key=user&value=ada", &s)
	if s.Value == nil || *s.Value != "ada" {
		t.Fatalf("/session/touch on n1: %+v", s)
	}
	s.Value = nil
	nodes["n2"].get(t, "/session/get?id=c1&key=user", &s)
	if s.Value == nil || *s.Value != "ada" {
		t.Fatalf("/session/get on n2 while n1 owns the session: %+v; want n1's answer", s)
	}
	// The node's metrics count what it shipped and the lease it holds.
	code, body := rawGet(t, nodes["n1"], "/metrics")
	for _, want := range []string{"durable_cluster_commits_total", "durable_cluster_records_total", "durable_cluster_leases_held 1"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("n1's /metrics: %d, no %q in:\n%s", code, want, body)
		}
	}
	// The inventory race runs closures: at a node that does not own its
	// items it is refused, naming the owner.
	var race raceResult
	nodes["n1"].get(t, "/inventory/race?n=2", &race)
	code, body = rawGet(t, nodes["n2"], "/inventory/race?n=2")
	if code != http.StatusMisdirectedRequest || !strings.Contains(body, `owned by node \"n1\"`) {
		t.Fatalf("/inventory/race on n2 while n1 owns its items: %d %s; want 421 naming n1", code, body)
	}
	if err := nodes["n1"].shutdown(); err != nil {
		t.Fatalf("n1's shutdown: %v\n%s", err, nodes["n1"].out.String())
	}
	// n1 handed its leases back as it shut down: n2 takes the session at
	// once and rebuilds it from the log.
	s.Value = nil
	nodes["n2"].get(t, "/session/get?id=c1&key=user", &s)
	if s.Value == nil || *s.Value != "ada" {
		t.Fatalf("/session/get on n2 after n1 left: %+v", s)
	}
	s.Value = nil
	nodes["n3"].get(t, "/session/get?id=c1&key=user", &s)
	if s.Value == nil || *s.Value != "ada" {
		t.Fatalf("/session/get on n3 while n2 owns the session: %+v; want n2's answer", s)
	}
}

func rawGet(t *testing.T, s *server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A node whose two peers are gone says in its log that it lost its
// quorum, naming them, and a shutdown that gives up says why.
func TestServe_ClusterNodeSaysItLostItsQuorum(t *testing.T) {
	ports, err := loopback.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	routes := make([]string, 3)
	for i := range routes {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i])
	}
	var peers []*cluster.Node
	for i := 1; i < 3; i++ {
		n, err := cluster.StartNode(cluster.NodeConfig{Name: fmt.Sprintf("n%d", i+1), Dir: t.TempDir(), Port: ports[i],
			ClusterName: "durable", ClusterPort: ports[3+i], Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Shutdown)
		peers = append(peers, n)
	}
	stderr := newWatchedWriter()
	cf := clusterFlags{node: "n1", natsPort: ports[0], clusterPort: ports[3], routes: strings.Join(routes, ","), shards: 2, leaseTTL: 2 * time.Second}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	_, stop, err := cf.start(t.Context(), filepath.Join(t.TempDir(), "n1"), log, stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	stderr.wait(t, "cluster: node n1 has its quorum")
	if err := cf.explain(nil); err != nil {
		t.Fatalf("explain(nil) = %v", err)
	}
	for _, n := range peers {
		n.Shutdown()
	}
	stderr.wait(t, "cluster: node n1 lost its quorum")
	abandoned := errors.New("core: shutdown: context deadline exceeded; abandoned: sessions/\"a\" (a turn is running)")
	err = cf.explain(abandoned)
	if !errors.Is(err, abandoned) || !strings.Contains(fmt.Sprint(err), "n1 lost its quorum") || !strings.Contains(fmt.Sprint(err), "(n2, n3 unreachable)") {
		t.Fatalf("a shutdown that gave up without a quorum says: %v; want why, and what it abandoned", err)
	}
}

// watchedWriter is a writer whose content a test can wait for.
type watchedWriter struct {
	mu      sync.Mutex // protects b
	b       strings.Builder
	changed chan struct{} // signalled after each write
}

func newWatchedWriter() *watchedWriter { return &watchedWriter{changed: make(chan struct{}, 1)} }

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// wait waits, up to a minute, until what was written contains want.
func (w *watchedWriter) wait(t *testing.T, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		w.mu.Lock()
		s := w.b.String()
		w.mu.Unlock()
		if strings.Contains(s, want) {
			return
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			t.Fatalf("%q was not written; got:\n%s", want, s)
		}
	}
}

func (w *watchedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
