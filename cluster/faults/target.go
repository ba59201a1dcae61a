package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/replog"
)

// NodeSpec is what a node process is started with. It is the same on every restart of the node.
type NodeSpec struct {
	Target      string   // the Target's name
	Index       int      // 0..n-1
	Name        string   // n1..nN
	Dir         string   // the node's own directory
	ClientPort  int      // the JetStream client port on 127.0.0.1
	ClusterPort int      // the JetStream cluster port
	Routes      []string // the node's links to the others
	Replicas    int      // replicas of every stream
	Shards      int
	ServePort   int    // a port of the node's own (for a target that serves calls over HTTP)
	LogLevel    string // the level of the node's log (Config.NodeLog; "": warn)
}

// A Target is what the harness puts through the faults: the node processes it starts and the
// client operations it makes on them. The engine target is the JetStream engine alone (raw
// appends with expected sequences); a target of the runtime in cluster mode runs a runtime in each
// node process and serves calls to an object over HTTP.
type Target interface {
	// Name names the target (the -faults.target flag).
	Name() string

	// RunNode is the body of a node process: it starts the node as spec says and serves until
	// ctx is done (SIGTERM), then stops it. SIGKILL and SIGSTOP come without warning.
	RunNode(ctx context.Context, spec NodeSpec) error

	// Dial returns a client of node spec, in the harness process. It is called once per node
	// while every node runs, and the client is used from many goroutines while nodes fail.
	Dial(ctx context.Context, spec NodeSpec) (Client, error)
}

// A Client makes operations on keys through one node.
type Client interface {
	// Write appends value as key's record after the record at expect (0: none), returning the new
	// record's sequence; an error that matches replog.ErrConflict is a refusal because the last
	// record is elsewhere, one that matches ErrRefused a refusal that stored nothing and says
	// nothing of the key's state, any other error an unknown outcome.
	Write(ctx context.Context, key string, expect uint64, value string) (uint64, error)

	// Read returns key's last record (0 and "" if none).
	Read(ctx context.Context, key string) (uint64, string, error)

	// Records returns every record of key, in order, at the end of the run.
	Records(ctx context.Context, key string) ([]Record, error)

	// Close closes the client.
	Close() error
}

// nodeEnv carries a node process's spec, as JSON, from the harness to the re-executed test binary.
const nodeEnv = "DURABLE_FAULTS_NODE"

// RunIfNode makes the process a node process if it was started as one (by the harness, which
// re-executes the test binary): it runs the spec's target until SIGTERM and exits. Call it first
// in TestMain; in any other process it returns at once.
func RunIfNode(targets ...Target) {
	raw := os.Getenv(nodeEnv)
	if raw == "" {
		return
	}
	var spec NodeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "faults: node spec: %v\n", err)
		os.Exit(2)
	}
	for _, t := range targets {
		if t.Name() == spec.Target {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			err := t.RunNode(ctx, spec)
			stop()
			if err != nil {
				fmt.Fprintf(os.Stderr, "faults: node %s: %v\n", spec.Name, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	fmt.Fprintf(os.Stderr, "faults: node %s: no target %q\n", spec.Name, spec.Target)
	os.Exit(2)
}

// EngineTarget puts the JetStream engine (package cluster) through the faults: each node process
// is an embedded JetStream node, each client an Engine connected to one node.
type EngineTarget struct{}

// Name implements Target.
func (EngineTarget) Name() string { return "engine" }

// RunNode implements Target.
func (EngineTarget) RunNode(ctx context.Context, spec NodeSpec) error {
	node, err := cluster.StartNode(engineNodeConfig(spec))
	if err != nil {
		return err
	}
	<-ctx.Done()
	node.Shutdown()
	return nil
}

func engineNodeConfig(spec NodeSpec) cluster.NodeConfig {
	return cluster.NodeConfig{
		Name:        spec.Name,
		Dir:         spec.Dir,
		Port:        spec.ClientPort,
		ClusterName: "faults",
		ClusterPort: spec.ClusterPort,
		Routes:      spec.Routes,
		// Nodes learn of each other's cluster ports from each other; pointing them at an address
		// where nothing listens keeps every route on its link, which the harness controls.
		ClusterAdvertise: "127.0.0.1:1",
	}
}

// Dial implements Target.
func (EngineTarget) Dial(ctx context.Context, spec NodeSpec) (Client, error) {
	nc, err := cluster.Connect([]string{fmt.Sprintf("nats://127.0.0.1:%d", spec.ClientPort)})
	if err != nil {
		return nil, err
	}
	e, err := cluster.New(ctx, nc, cluster.Config{Replicas: spec.Replicas, Shards: spec.Shards, Prefix: "faults", Timeout: 3 * time.Second})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &engineClient{e: e, close: nc.Close}, nil
}

type engineClient struct {
	e     *cluster.Engine
	close func()
}

func (c *engineClient) Write(ctx context.Context, key string, expect uint64, value string) (uint64, error) {
	return c.e.Append(ctx, key, expect, []byte(value))
}

func (c *engineClient) Read(ctx context.Context, key string) (uint64, string, error) {
	seq, rec, err := c.e.Last(ctx, key)
	return seq, string(rec), err
}

func (c *engineClient) Records(ctx context.Context, key string) ([]Record, error) {
	var recs []Record
	err := c.e.Read(ctx, key, 0, func(seq uint64, rec []byte) error {
		recs = append(recs, Record{Seq: seq, Value: string(rec)})
		return nil
	})
	return recs, err
}

func (c *engineClient) Close() error { c.close(); return nil }

// outcome classifies a write's error.
func outcome(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, replog.ErrConflict):
		return Conflict
	case errors.Is(err, ErrRefused):
		return Refused
	default:
		return Unknown
	}
}
