//go:build !race

// A 3-node (or larger) cluster whose routes go through proxies, for the tests that lose a node:
// left out of the race detector's runs, as those of cluster3_test.go.

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
)

// link is a TCP proxy on 127.0.0.1 that one node's route to another goes through; kill closes its
// connections and refuses new ones, as the network does once a peer's process is gone (its
// kernel closes its sockets); pause throws away what they carry, as when a peer's process is
// stopped or the network between drops everything.
type link struct {
	l      net.Listener
	to     string
	paused atomic.Bool

	mu    sync.Mutex
	dead  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(t *testing.T, to string) *link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &link{l: l, to: to, conns: map[net.Conn]struct{}{}}
	k.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			k.wg.Go(func() { k.serve(c) })
		}
	})
	return k
}

func (k *link) track(cs ...net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return false
	}
	for _, c := range cs {
		k.conns[c] = struct{}{}
	}
	return true
}

func (k *link) serve(near net.Conn) {
	far, err := net.Dial("tcp", k.to)
	if err != nil {
		near.Close()
		return
	}
	if !k.track(near, far) {
		near.Close()
		far.Close()
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !k.paused.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() { pipe(far, near) })
	wg.Go(func() { pipe(near, far) })
	wg.Wait()
}

// kill closes the link's connections and refuses new ones.
func (k *link) kill() {
	k.mu.Lock()
	k.dead = true
	for c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
}

// pause throws away what the link's connections carry, both ways, from now on.
func (k *link) pause() { k.paused.Store(true) }

func (k *link) close() {
	k.kill()
	k.l.Close()
	k.wg.Wait()
}

// proxiedCluster is nodes whose routes go through links, one per ordered pair of nodes, so that
// a node can be cut off from the others at once: a crash, as its peers see it.
type proxiedCluster struct {
	*testCluster
	links [][]*link // links[i][j]: node i's route to node j
}

func startProxiedCluster(t *testing.T) *proxiedCluster { return startProxiedClusterOf(t, 3) }

func startProxiedClusterOf(t *testing.T, n int) *proxiedCluster {
	t.Helper()
	pc := &proxiedCluster{testCluster: &testCluster{cfgs: make([]cluster.NodeConfig, n), nodes: make([]*cluster.Node, n)}}
	pc.links = make([][]*link, n)
	for i := range pc.links {
		pc.links[i] = make([]*link, n)
	}
	stop := func() {
		pc.shutdown()
		for i := range n {
			for j := range n {
				if pc.links[i][j] != nil {
					pc.links[i][j].close()
					pc.links[i][j] = nil
				}
			}
		}
	}
	t.Cleanup(stop)
	err := startFirst(2*n, func(ports []int) error {
		for i := range n {
			var routes []string
			for j := range n {
				if j != i {
					pc.links[i][j] = newLink(t, fmt.Sprintf("127.0.0.1:%d", ports[n+j]))
					routes = append(routes, "nats://"+pc.links[i][j].l.Addr().String())
				}
			}
			// Not under t.TempDir: its removal would run before the cleanup above has shut the
			// nodes down (cleanups run last first), while they still write; shutdown removes it.
			dir, err := os.MkdirTemp("", "durable-node")
			if err != nil {
				return err
			}
			pc.dirs = append(pc.dirs, dir)
			// An address no one listens on: nodes learn of each other only through their routes.
			pc.cfgs[i] = cluster.NodeConfig{Name: fmt.Sprintf("n%d", i+1), Dir: dir, Port: ports[i],
				ClusterName: "test", ClusterPort: ports[n+i], Routes: routes, ClusterAdvertise: "127.0.0.1:1"}
		}
		for i := range n {
			if err := pc.start(i); err != nil {
				return err
			}
		}
		return nil
	}, stop)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// kill cuts node i off from the others, both ways, at once. The node runs on, alone, until the
// test ends.
func (pc *proxiedCluster) kill(i int) {
	for j := range pc.nodes {
		if j != i {
			pc.links[i][j].kill()
			pc.links[j][i].kill()
		}
	}
}

// pause cuts node i off from the others, both ways, at once, leaving their connections open: to
// them it is a process that stopped.
func (pc *proxiedCluster) pause(i int) {
	for j := range pc.nodes {
		if j != i {
			pc.links[i][j].pause()
			pc.links[j][i].pause()
		}
	}
}

// nodeIndex returns the index of the node named name.
func (pc *proxiedCluster) nodeIndex(t *testing.T, name string) int {
	t.Helper()
	for i, cfg := range pc.cfgs {
		if cfg.Name == name {
			return i
		}
	}
	t.Fatalf("no node named %q", name)
	return -1
}

// keyIn returns a key of e's shard.
func keyIn(e *cluster.Engine, shard int) string { return keysIn(e, shard, 1)[0] }

// keysIn returns n keys of e's shard.
func keysIn(e *cluster.Engine, shard, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if key := fmt.Sprintf("counters/k%d", i); e.ShardOf(key) == shard {
			keys = append(keys, key)
		}
	}
	return keys
}

// waitLeader returns when one of the nodes other than dead says it leads stream, and when.
func (pc *proxiedCluster) waitLeader(ctx context.Context, dead int, stream string) (time.Time, error) {
	for {
		for i, n := range pc.nodes {
			if i == dead {
				continue
			}
			if n.LeadsStream(stream) {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no survivor leads %s: %w", stream, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
