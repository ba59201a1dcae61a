//go:build !race

// Left out of the race detector's runs, as the other 3-node tests are: the
// nodes are this test binary, and nats-server 2.15.2 has a data race of
// its own in its clustered publish path.

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// One command starts three node processes, prints their pages, PIDs and
// directories, and says when all are ready. A node SIGKILLed by its PID is
// reported and not restarted, and the others serve its objects within
// seconds, following the 421s' named owner; stopping the command stops
// every node and waits for them. // S-CL12
func TestCluster_OneCommandThreeNodes(t *testing.T) {
	t.Setenv(asMainEnv, "1") // the nodes are this binary, run as the program
	out := newWatchedWriter()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- runTo(ctx, []string{"cluster", "-data", t.TempDir(), "-shards", "4"}, out, out) }()
	out.wait(t, "cluster: 3 of 3 nodes ready after")
	t.Logf("3 fresh nodes ready after %v", time.Since(start).Round(100*time.Millisecond))

	type row struct {
		addr string
		pid  int
	}
	nodes := map[string]row{}
	for _, m := range regexp.MustCompile(`(?m)^(n\d)\s+http://(\S+)/\s+(\d+)\s+\S+$`).FindAllStringSubmatch(out.String(), -1) {
		pid, _ := strconv.Atoi(m[3])
		nodes[m[1]] = row{m[2], pid}
	}
	if len(nodes) != 3 {
		t.Fatalf("the table names %d nodes, want 3:\n%s", len(nodes), out.String())
	}
	code, _, body := httpGet(t, nodes["n1"].addr, "/session/touch?id=s1&key=user&value=ada")
	if code != http.StatusOK {
		t.Fatalf("/session/touch on n1: %d %s", code, body)
	}
	code, h, body := httpGet(t, nodes["n2"].addr, "/session/get?id=s1&key=user")
	if code != http.StatusMisdirectedRequest || h.Get("Durable-Owner") != "n1" || h.Get("Durable-Owner-Address") != "http://"+nodes["n1"].addr {
		t.Fatalf("n2 while n1 owns s1: %d %v %s; want 421 naming n1 and its address", code, h, body)
	}

	if err := syscall.Kill(nodes["n1"].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	out.wait(t, "cluster: node n1 (pid "+strconv.Itoa(nodes["n1"].pid)+") exited: signal: killed; not restarted")
	addr := nodes["n2"].addr
	for {
		code, h, body = httpGet(t, addr, "/session/get?id=s1&key=user")
		if code == http.StatusOK {
			break
		}
		if time.Since(killed) > 45*time.Second {
			t.Fatalf("no node serves s1 45 s after n1 was killed: %d %s", code, body)
		}
		if a := strings.TrimPrefix(h.Get("Durable-Owner-Address"), "http://"); code == http.StatusMisdirectedRequest && a != "" && a != nodes["n1"].addr {
			addr = a // the refusal names the new owner
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, `"value": "ada"`) {
		t.Fatalf("s1 after n1 was killed: %s; want its value", body)
	}
	t.Logf("s1 served again %v after n1 was killed", time.Since(killed).Round(10*time.Millisecond))

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the command: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "cluster: every node stopped") {
		t.Fatalf("the command did not say it stopped its nodes:\n%s", out.String())
	}
	for name, n := range nodes {
		if err := syscall.Kill(n.pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is left after the command stopped: %v", name, n.pid, err)
		}
	}
}

// httpGet gets a path of the server at addr (a failed connection is status 0).
func httpGet(t *testing.T, addr, path string) (int, http.Header, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
