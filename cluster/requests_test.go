package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
)

// A request whose caller stopped waiting before it was published is not published: its node never
// runs a call nobody waits for.
func TestRequests_NotPublishedOnceItsCallerLeft(t *testing.T) {
	node, err := StartNode(NodeConfig{Name: "n1", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var arrived []string
	sub, err := nc.Subscribe("to.n2", func(m *nats.Msg) {
		mu.Lock()
		arrived = append(arrived, string(m.Data))
		mu.Unlock()
		_ = m.Respond([]byte("re:" + string(m.Data)))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var r requests
	// A request queued, whose caller leaves before the queue's sender (another caller; here the
	// test) publishes it.
	q, err := r.enqueue(nc, "to.n2", []byte("left"))
	if err != nil {
		t.Fatal(err)
	}
	r.out.add(q)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.wait(ctx, q); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with its context canceled: %v; want context.Canceled", err)
	}
	r.publish()
	if m, err := r.do(t.Context(), nc, "to.n2", []byte("next")); err != nil || string(m.Data) != "re:next" {
		t.Fatalf("do = %v, %v; want re:next", m, err)
	}
	// The handler runs the requests in the order they were published: it has run for any before
	// the one it answered.
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"next"}; !slices.Equal(arrived, want) {
		t.Errorf("requests delivered: %q; want %q", arrived, want)
	}
}
