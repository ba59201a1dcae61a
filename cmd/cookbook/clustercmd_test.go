//go:build !race

// Left out of the race detector's runs, as the other 3-node tests are: the
// nodes are this test binary, and nats-server 2.15.2 has a data race of
// its own in its clustered publish path.

package main

import (
	"context"
	"encoding/json"
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
// directories, and says when all are ready. A session and a limiter are
// served at any node, the owner answering. A node SIGKILLed by its PID is
// reported and not restarted, and the others serve its objects within
// seconds, through any of them, with their state; stopping the command
// stops every node and waits for them. // S-CL12, S-CL14
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
	code, _, body = httpGet(t, nodes["n2"].addr, "/session/get?id=s1&key=user")
	if code != http.StatusOK || !strings.Contains(body, `"value": "ada"`) {
		t.Fatalf("/session/get on n2 while n1 owns s1: %d %s; want 200, n1's answer", code, body)
	}
	code, _, body = httpGet(t, nodes["n1"].addr, "/limit?key=k&n=3&limit=5&window=1h")
	if l := limitOf(body); code != http.StatusOK || l.Allowed != 3 {
		t.Fatalf("/limit on n1: %d %s", code, body)
	}
	code, _, body = httpGet(t, nodes["n3"].addr, "/limit?key=k&n=1&limit=5&window=1h")
	if l := limitOf(body); code != http.StatusOK || l.Allowed != 1 || l.Results[0].Remaining != 1 {
		t.Fatalf("/limit on n3 while n1 owns k: %d %s; want 200, n1's 4th check", code, body)
	}

	if err := syscall.Kill(nodes["n1"].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	out.wait(t, "cluster: node n1 (pid "+strconv.Itoa(nodes["n1"].pid)+") exited: signal: killed; not restarted")
	for {
		code, _, body = httpGet(t, nodes["n2"].addr, "/session/get?id=s1&key=user")
		if code == http.StatusOK {
			break
		}
		if time.Since(killed) > 45*time.Second {
			t.Fatalf("n2 does not serve s1 45 s after n1 was killed: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, `"value": "ada"`) {
		t.Fatalf("s1 after n1 was killed: %s; want its value", body)
	}
	t.Logf("s1 served again %v after n1 was killed", time.Since(killed).Round(10*time.Millisecond))
	// Both survivors serve it, and the limiter's key with its four checks,
	// whichever of them took each over.
	for _, n := range []string{"n2", "n3"} {
		code, _, body = httpGet(t, nodes[n].addr, "/session/get?id=s1&key=user")
		if code != http.StatusOK || !strings.Contains(body, `"value": "ada"`) {
			t.Fatalf("/session/get on %s after n1 was killed: %d %s; want 200 and the value", n, code, body)
		}
	}
	// A refusal that stored nothing (421, or 503 for a lease or an owner not reached yet) is sent
	// again; an answer whose outcome is unknown (500, or a deadline) may have made the 5th check
	// already, and then the one sent again is the 6th, refused.
	unknown := false
	for {
		code, _, body = httpGet(t, nodes["n2"].addr, "/limit?key=k&n=1&limit=5&window=1h")
		if code == http.StatusOK || time.Since(killed) > 45*time.Second {
			break
		}
		t.Logf("/limit on n2 after n1 was killed: %d %s", code, body)
		unknown = unknown || code == http.StatusInternalServerError || strings.Contains(body, "deadline") || strings.Contains(body, "canceled")
		time.Sleep(50 * time.Millisecond)
	}
	l := limitOf(body)
	fifth := code == http.StatusOK && l.Allowed == 1 && l.Results[0].Remaining == 0
	if !fifth && !(unknown && code == http.StatusOK && l.Refused == 1) {
		t.Fatalf("/limit on n2 after n1 was killed: %d %s; want the 5th check, none remaining (or, after an answer of unknown outcome, the 6th refused)", code, body)
	}
	code, _, body = httpGet(t, nodes["n3"].addr, "/limit?key=k&n=1&limit=5&window=1h")
	if l := limitOf(body); code != http.StatusOK || l.Refused != 1 {
		t.Fatalf("/limit on n3 after n1 was killed: %d %s; want the 6th check refused", code, body)
	}

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

// limitOf reads a /limit answer; a body that is not one reads as none.
func limitOf(body string) limitResult {
	l := limitResult{Results: []limitCheck{{}}}
	json.Unmarshal([]byte(body), &l)
	return l
}
