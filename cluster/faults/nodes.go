package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Cluster is node processes of the runtime target on 127.0.0.1 (the test binary run again, told
// by the environment to be a node: call RunIfNode in TestMain), each with its own directory, and
// a client of them that sends each key's writes to the node that owns it. StartCluster starts it;
// every node process is killed and reaped when the test ends, however it ends.
type Cluster struct {
	t       testing.TB
	h       *harness
	names   []string
	router  *router
	hc      *http.Client // for the nodes' /readyz and /status
	clients []*RuntimeClient
}

// StartCluster starts nodes node processes of the runtime target (their log in shards streams)
// and returns once every node is ready.
func StartCluster(t testing.TB, nodes, shards int, logf func(format string, args ...any)) *Cluster {
	if logf == nil {
		logf = t.Logf
	}
	h := &harness{t: t, cfg: Config{Target: RuntimeTarget{}, Nodes: nodes, Replicas: min(3, nodes), Shards: shards, Logf: logf}}
	root := t.TempDir()
	t.Cleanup(func() { keepLogs(t, h, false) }) // after the nodes are reaped, before the directory goes
	t.Cleanup(h.reapAll)                        // registered after TempDir's, so it runs before the directory goes
	h.setup(root)
	c := &Cluster{t: t, h: h, hc: &http.Client{Timeout: 2 * time.Second}}
	for _, p := range h.procs {
		c.names = append(c.names, p.spec.Name)
		c.clients = append(c.clients, &RuntimeClient{Base: fmt.Sprintf("http://127.0.0.1:%d", p.spec.ServePort),
			HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}}})
	}
	t.Cleanup(func() { // before the nodes are reaped
		for _, n := range c.clients {
			n.Close()
		}
		c.hc.CloseIdleConnections()
	})
	c.router = newRouter(c.names, c.clients, 4*time.Second, 20*time.Millisecond)
	c.waitReady(3 * time.Minute)
	return c
}

// Names are the nodes' names.
func (c *Cluster) Names() []string { return slices.Clone(c.names) }

// Kill sends the node SIGKILL and reaps it.
func (c *Cluster) Kill(name string) { c.proc(name).kill() }

// Start starts the node again if it is not running, and returns once it accepts connections.
func (c *Cluster) Start(name string) {
	if p := c.proc(name); !p.running() {
		c.h.launch(p)
	}
}

// WaitReady waits until every node runs and is ready (GET /readyz), within the given time.
func (c *Cluster) WaitReady(within time.Duration) { c.waitReady(within) }

// Writer returns the one writer of key: each Write writes a new value expecting the version the
// last one made, through the cluster's client, and fails if it is not acknowledged within budget.
func (c *Cluster) Writer(key string, budget time.Duration) *Writer {
	return &Writer{w: &writer{r: c.router, key: registerNS + "/" + key, budget: budget}}
}

// Writer writes one register of a Cluster.
type Writer struct{ w *writer }

// Written is an acknowledged write: the version it made, the node that acknowledged it, and when
// the attempt that was acknowledged began and its acknowledgement came.
type Written struct {
	Version    uint64
	Node       string
	Start, End time.Time
}

// Write makes one write call (sent again, to the owner a refusal names or to another node, until
// acknowledged or the budget is spent). An error that is not the budget's is a broken promise: an
// acknowledged write lost, or a value the writer did not write.
func (w *Writer) Write(ctx context.Context) (Written, error) {
	res := w.w.write(ctx)
	if !res.ok {
		return Written{}, res.err
	}
	return Written{Version: res.version, Node: w.w.r.names[res.node], Start: res.start, End: res.end}, nil
}

// waitReady waits until every node process runs and answers GET /readyz with 200.
func (c *Cluster) waitReady(within time.Duration) {
	deadline := time.Now().Add(within)
	for i, p := range c.h.procs {
		for {
			if !p.running() {
				c.t.Fatalf("faults: node %s is not running (its log: %s)", c.names[i], p.logPath)
			}
			resp, err := c.hc.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.spec.ServePort))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("faults: node %s not ready within %v (its log: %s)", c.names[i], within, p.logPath)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// statuses reads GET /status of every node; a node that does not answer is left out. It reads
// only the nodes' specs, so it may run while nodes are killed and started.
func (c *Cluster) statuses() map[string]NodeStatus {
	out := map[string]NodeStatus{}
	for i, p := range c.h.procs {
		resp, err := c.hc.Get(fmt.Sprintf("http://127.0.0.1:%d/status", p.spec.ServePort))
		if err != nil {
			continue
		}
		var st NodeStatus
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			out[c.names[i]] = st
		}
	}
	return out
}

// removeDir deletes a node's directory and makes it again, empty: its machine was replaced.
func (c *Cluster) removeDir(p *proc) {
	if err := os.RemoveAll(p.spec.Dir); err != nil {
		c.t.Fatalf("faults: %v", err)
	}
	if err := os.MkdirAll(p.spec.Dir, 0o700); err != nil {
		c.t.Fatalf("faults: %v", err)
	}
}

func (c *Cluster) proc(name string) *proc { return c.h.procs[slices.Index(c.names, name)] }

// DebugLogsEnv, set (to anything) in the environment of a run, makes the runtime target's nodes
// log at debug level, and their logs kept as when the run fails (as -faults.nodelog=debug and
// -faults.keeplogs do for TestFaults).
const DebugLogsEnv = "DURABLE_FAULTS_DEBUG"

// keepLogs copies the nodes' logs out of the test's directory when the test failed, or always if
// asked (always, or DebugLogsEnv), so that what the nodes said survives the directory's removal,
// and says where they are.
func keepLogs(t testing.TB, h *harness, always bool) {
	if !always && !t.Failed() && os.Getenv(DebugLogsEnv) == "" {
		return
	}
	dir, err := os.MkdirTemp("", "faults-logs-")
	if err != nil {
		t.Logf("faults: the nodes' logs are not kept: %v", err)
		return
	}
	for _, p := range h.procs {
		b, err := os.ReadFile(p.logPath)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, p.spec.Name+".log"), b, 0o600)
		}
		if err != nil {
			t.Logf("faults: %s's log is not kept: %v", p.spec.Name, err)
		}
	}
	t.Logf("faults: the nodes' logs are kept in %s", dir)
}
