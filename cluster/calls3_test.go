//go:build !race

package cluster_test

import (
	"testing"

	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL13: the engine keeps replog.Calls' contract on three nodes: a request crosses the routes
// between the servers to the node that serves its subject.
func TestEngine_CallsContract3Nodes(t *testing.T) {
	c := sharedCluster(t)
	replogtest.CallsContract(t, func(t *testing.T, n int) []replog.Calls { return c.calls(t, n) })
}
