package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// clusterFlags are serve's flags of cluster mode: with -node set, the
// server is one node of a cluster whose objects' commits are replicated by
// NATS JetStream, embedded in the process (or external, with -nats).
type clusterFlags struct {
	node        string
	natsDir     string
	natsPort    int
	clusterPort int
	routes      string
	external    string
	replicas    int
	shards      int
	leaseTTL    time.Duration
	advertise   string

	listening string        // the HTTP server's address, for -advertise's default
	running   *cluster.Node // the embedded node, once started
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.node, "node", "", "cluster mode: this node's name (unique in the cluster); unset, the server runs alone")
	fs.StringVar(&c.natsDir, "nats-dir", "", "cluster mode: the embedded JetStream node's directory (default: the data directory's name + .jetstream, next to it)")
	fs.IntVar(&c.natsPort, "nats-port", 4222, "cluster mode: the embedded node's client port, on 127.0.0.1")
	fs.IntVar(&c.clusterPort, "cluster-port", 6222, "cluster mode: the embedded node's port for the other nodes, on 127.0.0.1")
	fs.StringVar(&c.routes, "routes", "", "cluster mode: the other nodes' cluster URLs, comma-separated (nats://127.0.0.1:6223,...); unset: a cluster of one node")
	fs.StringVar(&c.external, "nats", "", "cluster mode: URLs of an external JetStream cluster, comma-separated, instead of an embedded node")
	fs.IntVar(&c.replicas, "replicas", 0, "cluster mode: replicas of each object's log (default 3, or 1 for a cluster of one node)")
	fs.IntVar(&c.shards, "shards", 16, "cluster mode: streams the objects' logs are spread over; the same on every node, for the life of the data")
	fs.DurationVar(&c.leaseTTL, "lease", time.Second, "cluster mode: how long a shard's lease lasts unrenewed (failover takes about this long)")
	fs.StringVar(&c.advertise, "advertise", "", "cluster mode: where this node's HTTP server is reached, named in the other nodes' 421s (default http:// and the address it listens on)")
}

// drainGrace bounds the hand-over of the embedded node's raft leaderships
// at a planned stop.
const drainGrace = 5 * time.Second

// start starts the embedded node (unless -nats names an external
// cluster), connects to it and returns the runtime's Replication and a
// stop function to call once the runtime is shut down. Without -node it
// returns nil.
func (c *clusterFlags) start(ctx context.Context, dataDir string, log *slog.Logger, stderr io.Writer) (*core.Replication, func(), error) {
	if c.node == "" {
		if c.external != "" || c.routes != "" {
			return nil, nil, errors.New("cookbook: -nats and -routes need -node: cluster mode names each node")
		}
		return nil, nil, nil
	}
	var node *cluster.Node
	urls := splitList(c.external)
	replicas := c.replicas
	if len(urls) == 0 {
		dir := c.natsDir
		if dir == "" {
			dir = strings.TrimRight(dataDir, "/") + ".jetstream"
		}
		// The node's own lines at warning and above, and what it says of
		// its peers and its quorum: its notices (every route connected,
		// every leader elected) would drown the server's.
		nlog := slog.New(nodeLines{slog.NewTextHandler(stderr, nil)}).With("component", "jetstream")
		cfg := cluster.NodeConfig{Name: c.node, Dir: dir, Port: c.natsPort, Logger: nlog}
		if routes := splitList(c.routes); len(routes) > 0 {
			cfg.ClusterName, cfg.ClusterPort, cfg.Routes = "durable", c.clusterPort, routes
		} else if replicas == 0 {
			replicas = 1 // a cluster of one node: one copy
		}
		var err error
		if node, err = cluster.StartNode(cfg); err != nil {
			return nil, nil, fmt.Errorf("cookbook: start the JetStream node: %w", err)
		}
		c.running = node
		urls = []string{node.ClientURL()}
	}
	stop := func() {
		if node != nil {
			// A planned stop: hand this node's raft leaderships over first, so
			// that no shard's log waits out an election (the runtime's
			// Shutdown has handed its shards back already).
			ctx, cancel := context.WithTimeout(context.Background(), drainGrace)
			defer cancel()
			if err := node.Drain(ctx); err != nil {
				log.Warn("cluster mode: the JetStream node stops without handing all its leaderships over", "error", err)
			}
			node.Shutdown()
		}
	}
	nc, err := cluster.Connect(urls, nats.Name("durable cookbook "+c.node))
	if err != nil {
		stop()
		return nil, nil, err
	}
	// A new cluster is ready once a majority of its nodes run: wait for
	// the others until interrupted, saying what is missing.
	log.Info("cluster mode: starting the engine (it waits for a majority of the nodes)", "node", c.node, "nats", strings.Join(urls, ","))
	eng, err := cluster.New(ctx, nc, cluster.Config{Replicas: replicas, Shards: c.shards, Logger: log.With("node", c.node)})
	if err != nil {
		nc.Close()
		stop()
		return nil, nil, fmt.Errorf("cookbook: cluster mode: %w", err)
	}
	advertise := c.advertise
	if advertise == "" && c.listening != "" {
		advertise = "http://" + c.listening
	}
	// Calls: the workshop's methods called at any node run at the object's
	// owner, over NATS request-reply (CL13, CL14).
	return &core.Replication{Node: c.node, Advertise: advertise, Log: eng, Leases: eng, Beacon: eng, Calls: eng, LeaseTTL: c.leaseTTL}, func() { nc.Close(); stop() }, nil
}

// explain adds to the error of a shutdown that gave up why it did, when
// the node has lost its quorum: what was left waited for commits that no
// majority could acknowledge.
func (c *clusterFlags) explain(err error) error {
	if err == nil || c.running == nil {
		return err
	}
	if qerr := c.running.Quorum(); qerr != nil {
		return fmt.Errorf("shutdown gave up after %v: %w; what was running waited for commits that no majority could acknowledge:\n%w", shutdownGrace, qerr, err)
	}
	return err
}

// nodeLines passes the embedded node's lines at warning and above, and
// its own ones ("cluster: ...", its peers and its quorum) at Info.
type nodeLines struct{ slog.Handler }

func (h nodeLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && !strings.HasPrefix(r.Message, "cluster: ") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h nodeLines) WithAttrs(as []slog.Attr) slog.Handler { return nodeLines{h.Handler.WithAttrs(as)} }
func (h nodeLines) WithGroup(name string) slog.Handler    { return nodeLines{h.Handler.WithGroup(name)} }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
