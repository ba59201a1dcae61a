package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// counter is the object of the routing test: a count in storage.
type counter struct{ st *core.State }

// S-CL13, S-CL14: a method called at a node that does not own the object runs at the owner, over
// NATS request-reply: two runtimes, each with an engine of its own over one embedded server; an
// object's own error keeps its message; an argument over the connection's payload is ErrTooLarge,
// not sent.
func TestEngine_MethodCallAcrossNodes(t *testing.T) {
	c := startCluster(t, 1)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), Replicas: 1, Shards: 4}
	type node struct {
		rt   *core.Runtime
		add  func(context.Context, *core.Stub[*counter], int) (int, error)
		echo func(context.Context, *core.Stub[*counter], string) (string, error)
		ns   *core.Namespace[*counter]
	}
	open := func(name string) *node {
		e := c.engine(t, 0, cfg)
		rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
			Replication: &core.Replication{Node: name, Log: e, Leases: e, Beacon: e, Calls: e}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		ns, err := core.Register(rt, "counters", func(_ context.Context, st *core.State) (*counter, error) { return &counter{st}, nil })
		if err != nil {
			t.Fatal(err)
		}
		add, err := core.Define(ns, "add", func(ctx context.Context, c *counter, by int) (int, error) {
			if by < 0 {
				return 0, errors.New("counters only go up")
			}
			v, _, err := c.st.Storage().Get(ctx, "n")
			if err != nil {
				return 0, err
			}
			n := len(v) + by
			return n, c.st.Storage().Put(ctx, "n", make([]byte, n))
		})
		if err != nil {
			t.Fatal(err)
		}
		echo, err := core.Define(ns, "echo", func(ctx context.Context, c *counter, s string) (string, error) { return s, nil })
		if err != nil {
			t.Fatal(err)
		}
		return &node{rt: rt, add: add, echo: echo, ns: ns}
	}
	a, b := open("a"), open("b")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sa, _ := a.ns.Get("hits")
	sb, _ := b.ns.Get("hits")
	if got, err := a.add(ctx, sa, 1); err != nil || got != 1 {
		t.Fatalf("add at the owner = %d, %v; want 1", got, err)
	}
	for i := 2; i <= 5; i++ {
		got, err := b.add(ctx, sb, 1)
		if err != nil || got != i {
			t.Fatalf("add at the other node = %d, %v; want %d", got, err, i)
		}
	}
	if held := b.rt.Stats().Cluster.HeldLeases; held != 0 {
		t.Fatalf("node b holds %d leases; want 0: the calls ran at a", held)
	}
	_, err := b.add(ctx, sb, -1)
	var re *core.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("an object's error across nodes: %v; want a *RemoteError", err)
	}
	if want := "counters only go up"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not carry %q", err, want)
	}
	_, err = core.Call(ctx, sb, func(ctx context.Context, c *counter) (int, error) { return 0, nil })
	var noe *core.NotOwnerError
	if !errors.As(err, &noe) || noe.Holder != "a" {
		t.Fatalf("a closure at the other node: %v; want a NotOwnerError naming a", err)
	}
	big := strings.Repeat("x", cluster.MaxPayload)
	if _, err := b.echo(ctx, sb, big); !errors.Is(err, core.ErrTooLarge) {
		t.Fatalf("an argument over the payload: %v; want ErrTooLarge", err)
	}
	if got, err := b.echo(ctx, sb, "small"); err != nil || got != "small" {
		t.Fatalf("echo = %q, %v", got, err)
	}
}
