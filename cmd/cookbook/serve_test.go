package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core"
)

// server is serve running in the background on a loopback port.
type server struct {
	addr string
	stop context.CancelFunc
	done chan error
	out  *syncBuffer
}

// startServe runs serve with args on 127.0.0.1:0 and waits until it
// listens.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	s, wait := spawnServe(t, args...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	return s
}

// spawnServe starts serve with args on 127.0.0.1:0; wait, which any
// goroutine may call, returns once it listens (or serve's error).
func spawnServe(t *testing.T, args ...string) (s *server, wait func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	s = &server{stop: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	ready := make(chan string, 1)
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	go func() { s.done <- serve(ctx, args, s.out, s.out, func(addr string) { ready <- addr }) }()
	t.Cleanup(func() {
		cancel()
		<-s.done // drained by shutdown when the test did not
	})
	return s, func() error {
		select {
		case s.addr = <-ready:
			return nil
		case err := <-s.done:
			s.done <- err // for the cleanup
			return fmt.Errorf("serve: %v\n%s", err, s.out.String())
		}
	}
}

// shutdown stops the server as SIGINT does and returns serve's error.
func (s *server) shutdown() error {
	s.stop()
	err := <-s.done
	s.done <- err // for the cleanup
	return err
}

func (s *server) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// Serving, then a shutdown: WebSockets get 1001, alarms survive the
// restart.
func TestServe_ShutsDownGracefullyAndKeepsAlarms(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "-data", dir)
	if !strings.Contains(s.out.String(), "http://"+s.addr+"/") || !strings.Contains(s.out.String(), dir) {
		t.Errorf("the banner lacks the URL or the data directory:\n%s", s.out.String())
	}
	var armed struct{ Alarm int64 }
	s.get(t, "/arm?o=keep&ms=3600000", &armed)

	c, _, err := websocket.DefaultDialer.Dial("ws://"+s.addr+"/room/lobby?name=ann", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, live, err := c.ReadMessage(); err != nil || string(live) != "!live 0" {
		t.Fatalf("join: got %q, %v", live, err)
	}

	// Read while the server shuts down, as a browser does: gorilla answers
	// the Close frame, and closing our side ends the runtime's wait.
	ended := make(chan error, 1)
	go func() {
		_, _, err := c.ReadMessage()
		c.Close()
		ended <- err
	}()
	if err := s.shutdown(); err != nil {
		t.Fatalf("serve returned %v\n%s", err, s.out.String())
	}
	err = <-ended
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != core.CloseGoingAway {
		t.Errorf("the WebSocket ended with %v, want close %d", err, core.CloseGoingAway)
	}

	s2 := startServe(t, "-data", dir)
	var st LabState
	s2.get(t, "/state?o=keep", &st)
	if st.Alarm == nil || *st.Alarm != armed.Alarm {
		t.Errorf("after the restart the alarm is %v, want %d", st.Alarm, armed.Alarm)
	}
}

func TestServe_Flags(t *testing.T) {
	var out bytes.Buffer
	if err := serve(t.Context(), []string{"-nope"}, &out, &out, nil); err == nil {
		t.Error("serve -nope: no error")
	}
	if err := serve(t.Context(), []string{"extra"}, &out, &out, nil); err == nil {
		t.Error("serve extra: no error")
	}
	s := startServe(t, "-data", t.TempDir(), "-fast")
	if !strings.Contains(s.out.String(), "100 ms, 200 ms, ... 3.2 s (-fast)") {
		t.Errorf("the banner does not show the fast ladder:\n%s", s.out.String())
	}
	if !regexp.MustCompile(`cache   [1-9][0-9]* open objects at most`).MatchString(s.out.String()) {
		t.Errorf("the banner does not say how many objects stay open:\n%s", s.out.String())
	}
	// Plain curl lines, at the interval of the ladder in use.
	for _, tc := range []struct {
		fast bool
		want string
	}{
		{true, `do sleep 1; curl -s "$B/state?o=fail"; done`},
		{false, `do sleep 20; curl -s "$B/state?o=fail"; done`},
	} {
		var b bytes.Buffer
		printBanner(&b, "127.0.0.1:8787", "data", 5833, tc.fast)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("banner (fast=%t) lacks %q:\n%s", tc.fast, tc.want, b.String())
		}
		for _, tool := range []string{"watch ", "jq "} {
			if strings.Contains(b.String(), tool) {
				t.Errorf("banner (fast=%t) needs %q:\n%s", tc.fast, tool, b.String())
			}
		}
	}
}

// -h prints a usage that names both subcommands, on stdout, and is no
// error; a bad flag is a usage error (exit status 2).
func TestRun_Help(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"serve", "-h"}, {"tour", "-h"}, {"-addr", "127.0.0.1:0", "-h"}} {
		var out, errOut bytes.Buffer
		err := runTo(t.Context(), args, &out, &errOut)
		if err != nil {
			t.Errorf("%q: got %v, want no error", args, err)
		}
		for _, want := range []string{"cookbook [serve]", "cookbook tour", "-node NAME", "-routes", "-nats"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q: the usage lacks %q:\n%s", args, want, out.String())
			}
		}
		if strings.Contains(out.String(), "Usage of") {
			t.Errorf("%q: the flag package's bare usage:\n%s", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	err := runTo(t.Context(), []string{"serve", "-nope"}, &out, &errOut)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(errOut.String(), "cookbook tour") {
		t.Errorf("serve -nope: got %v and %q, want a usage error with the usage on stderr", err, errOut.String())
	}
}

func TestRun_Commands(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runTo(t.Context(), []string{"help"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "cookbook tour") {
		t.Errorf("help: %v, %q", err, out.String())
	}
	if err := runTo(t.Context(), []string{"bake"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), `unknown command "bake"`) {
		t.Errorf("bake: got %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// S-T2: /metrics serves the runtime's metrics in Prometheus's text format,
// per namespace, as a scraper reads them.
func TestServe_Metrics(t *testing.T) {
	s := startServe(t, "-data", t.TempDir())
	var armed struct{ Alarm int64 }
	s.get(t, "/arm?o=scraped&ms=3600000", &armed)
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	text := body.String()
	for _, want := range []string{
		"# TYPE durable_calls_total counter",
		"# TYPE durable_queue_time_seconds histogram",
		"# TYPE durable_turn_duration_seconds histogram",
		"# TYPE durable_commit_latency_seconds histogram",
		"# TYPE durable_commit_turns histogram",
		"# TYPE durable_rows_written_total counter",
		"# TYPE durable_rows_read_total counter",
		"# TYPE durable_queue_length gauge",
		"# TYPE durable_objects_resident gauge",
		"# TYPE durable_databases_open gauge",
		"# TYPE durable_websocket_connections gauge",
		`durable_objects_resident{durable_namespace="lab"} 1`,
		`durable_databases_open{durable_namespace="lab"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(text, `durable_calls_total{durable_namespace="lab"}`) {
		t.Errorf("/metrics counts no call of the lab namespace")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
	var routes struct {
		Routes []map[string]string `json:"routes"`
	}
	s.get(t, "/routes", &routes)
	if !slices.ContainsFunc(routes.Routes, func(r map[string]string) bool { return r["path"] == "/metrics" && r["method"] == "GET" }) {
		t.Errorf("/routes lacks GET /metrics: %v", routes.Routes)
	}
}
