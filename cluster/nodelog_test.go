package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// S-X7: while a peer is down the server tries each of its routes every second and logs each failure;
// while a stream has no quorum it says so every few seconds. Each such condition is logged once
// per change of state: when it starts, and again only after it was quiet for repeatQuiet. Other
// lines all pass.
func TestNodeLog_RepeatsOncePerChange(t *testing.T) {
	var buf bytes.Buffer
	l := newNodeLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	l.now = func() time.Time { return now }
	const (
		down2 = "Error trying to connect to route (attempt %d): dial tcp 127.0.0.1:6223: connect: connection refused"
		down3 = "Error trying to connect to route (attempt %d): dial tcp 127.0.0.1:6224: i/o timeout"
		stall = "JetStream cluster stream '$G > durable_log_0' has NO quorum, stalled"
	)
	script := []struct {
		at     time.Duration
		level  string // "error", "warn", "notice"
		format string
		arg    int
		passed bool
	}{
		{0, "error", down2, 1, true}, // n2 goes down: four routes fail at once
		{0, "error", down2, 1, false},
		{0, "error", down2, 1, false},
		{0, "error", down2, 1, false},
		{time.Second, "error", down2, 2, false},
		{time.Second, "error", down3, 1, true}, // another peer, another line
		{2 * time.Second, "warn", stall, 0, true},
		{12 * time.Second, "warn", stall, 0, false},
		{20 * time.Second, "error", down2, 20, false}, // still down
		{20 * time.Second, "notice", "127.0.0.1:6223 - rid:9 - Route connection created", 0, true},
		{20 * time.Second, "error", "some other error %d", 1, true},
		{21 * time.Second, "error", "some other error %d", 1, true},
		{51 * time.Second, "error", down2, 1, true}, // n2 back at 20 s, down again
	}
	for i, step := range script {
		now = t0.Add(step.at)
		buf.Reset()
		var args []any
		if strings.Contains(step.format, "%d") {
			args = append(args, step.arg)
		}
		switch step.level {
		case "error":
			l.Errorf(step.format, args...)
		case "warn":
			l.Warnf(step.format, args...)
		default:
			l.Noticef(step.format, args...)
		}
		if got := buf.Len() > 0; got != step.passed {
			t.Errorf("step %d at %v: %q passed = %v; want %v", i, step.at, step.format, got, step.passed)
		}
	}
}

// A route that connected makes the next failure to connect to it a change of state, logged at once.
func TestNodeLog_RouteUpAgain(t *testing.T) {
	var buf bytes.Buffer
	l := newNodeLog(slog.New(slog.NewTextHandler(&buf, nil)))
	const down = "Error trying to connect to route (attempt %d): dial tcp 127.0.0.1:6223: connect: connection refused"
	for i, step := range []struct {
		connected bool
		passed    bool
	}{{false, true}, {false, false}, {true, false}, {false, true}, {false, false}} {
		buf.Reset()
		if step.connected {
			l.connected("127.0.0.1:6223")
			continue
		}
		l.Errorf(down, i+1)
		if got := buf.Len() > 0; got != step.passed {
			t.Errorf("step %d: passed = %v; want %v", i, got, step.passed)
		}
	}
}
