// Helpers of the tests of the turn's guarantees (alarms across SIGKILL
// inside Await, output gates, failed turns, Shutdown, one clock,
// deadlocks): bounded waits, a child process, captured logs.

package core_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// hangGuard bounds every wait, outside a synctest bubble, for something
// that takes milliseconds when the runtime works: a wait that outlasts it
// is a hang, and fails the test instead of the run.
const hangGuard = 10 * time.Second

// openRuntime opens a runtime outside a synctest bubble and closes it when
// the test ends. A Close that hangs fails the test after hangGuard and is
// abandoned, so that one wedged runtime does not hang the whole run.
func openRuntime(t *testing.T, opts core.Options) *core.Runtime {
	t.Helper()
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- rt.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("close runtime: %v", err)
			}
		case <-time.After(hangGuard):
			t.Errorf("Runtime.Close did not return within %v: abandoned", hangGuard)
		}
	})
	return rt
}

// within runs fn on a goroutine of its own and reports whether it returned
// within d. A fn that hangs is abandoned.
func within(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// recvWithin waits for a value on ch for at most d (fake time in a bubble).
func recvWithin[V any](t *testing.T, ch <-chan V, d time.Duration, what string) (V, bool) {
	t.Helper()
	select {
	case v := <-ch:
		return v, true
	case <-time.After(d):
		t.Errorf("%s: nothing within %v", what, d)
		var zero V
		return zero, false
	}
}

// childEnv names the test a re-executed test binary is to run as a child.
const childEnv = "DURABLE_TEST_CHILD"

// isChild reports whether this process is the child of t.
func isChild(t *testing.T) bool { return os.Getenv(childEnv) == t.Name() }

// runChild runs t again in a child process (the test binary re-executed
// with -test.run) and returns its combined output and exit error.
func runChild(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=60s")
	cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// tail returns the end of a child's output, for failure messages.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// logCapture is a slog.Handler that keeps every record, for tests that
// assert on what the runtime logged.
type logCapture struct {
	*logStore
	attrs []slog.Attr // from WithAttrs
	group string      // from WithGroup, as a key prefix
}

type logStore struct {
	mu      sync.Mutex
	records []string // each record as "LEVEL msg k=v ..."
	notify  chan struct{}
}

func newLogCapture() *logCapture {
	return &logCapture{logStore: &logStore{notify: make(chan struct{}, 1)}}
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	put := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s%s=%v", h.group, a.Key, a.Value.Resolve().Any())
		return true
	}
	for _, a := range h.attrs {
		put(a)
	}
	r.Attrs(put)
	h.mu.Lock()
	h.records = append(h.records, b.String())
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
	return nil
}

func (h *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *logCapture) WithGroup(name string) slog.Handler {
	c := *h
	c.group = h.group + name + "."
	return &c
}

// all returns a copy of the records.
func (h *logStore) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.records...)
}

// find returns the first record containing s.
func (h *logStore) find(s string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if strings.Contains(r, s) {
			return r, true
		}
	}
	return "", false
}

// waitFor waits until a record containing s arrives, for at most d.
func (h *logStore) waitFor(s string, d time.Duration) (string, bool) {
	deadline := time.After(d)
	for {
		if r, ok := h.find(s); ok {
			return r, true
		}
		select {
		case <-h.notify:
		case <-deadline:
			return "", false
		}
	}
}
