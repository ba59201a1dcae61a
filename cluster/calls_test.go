package cluster_test

import (
	"fmt"
	"testing"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// calls returns n views of one engine's request-reply, spread over the cluster's nodes.
func (c *testCluster) calls(t *testing.T, n int) []replog.Calls {
	t.Helper()
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	cs := make([]replog.Calls, n)
	for i := range cs {
		cs[i] = c.engine(t, i%len(c.nodes), cfg)
	}
	return cs
}

// S-CL13: the engine keeps replog.Calls' contract on one node: NATS request-reply on one subject
// per node.
func TestEngine_CallsContract1Node(t *testing.T) {
	c := startCluster(t, 1)
	replogtest.CallsContract(t, func(t *testing.T, n int) []replog.Calls { return c.calls(t, n) })
}
