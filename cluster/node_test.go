package cluster_test

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
)

// StartNode fails at once, with an error that says the port is in use, when its client or
// cluster port is taken, instead of waiting out its 30 s for the server to be ready.
func TestStartNode_PortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	for _, cfg := range []cluster.NodeConfig{
		{Name: "n1", Dir: t.TempDir(), Port: taken},
		{Name: "n1", Dir: t.TempDir(), ClusterName: "test", ClusterPort: taken, Routes: []string{"nats://127.0.0.1:1"}},
	} {
		start := time.Now()
		n, err := cluster.StartNode(cfg)
		if err == nil {
			n.Shutdown()
			t.Fatalf("port %d is taken, and StartNode (port %d, cluster port %d) succeeded", taken, cfg.Port, cfg.ClusterPort)
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("StartNode on a taken port: %v; want an error matching EADDRINUSE", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("StartNode on a taken port failed after %v; want at once", took)
		}
	}
}

// A test cluster whose port another process takes between its pick and the node's start starts
// all the same, on other ports.
func TestStartFirst_PortTakenBeforeTheStart(t *testing.T) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var node *cluster.Node
	tries := 0
	var firstPort int
	err := startFirst(1, func(ports []int) error {
		tries++
		if tries == 1 { // another process takes the port picked
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
			firstPort = ports[0]
		}
		n, err := cluster.StartNode(cluster.NodeConfig{Name: "n1", Dir: t.TempDir(), Port: ports[0]})
		node = n
		return err
	}, func() {})
	if err != nil {
		t.Fatalf("startFirst: %v", err)
	}
	defer node.Shutdown()
	if tries != 2 {
		t.Errorf("started after %d tries; want 2", tries)
	}
	if want := "127.0.0.1:" + strconv.Itoa(firstPort); node.ClientURL() == "nats://"+want {
		t.Errorf("the node listens on the taken port %d", firstPort)
	}
}
