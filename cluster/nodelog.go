package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// nodeLog passes the embedded server's log lines to a slog.Logger, with the lines that a lasting
// condition repeats said once per change of state: while a peer is down the server tries its route
// every second on each of several connections and logs every failure, and while a stream has no
// quorum it says so again every few seconds. Such a line is passed when it is new, and left out
// (logged at debug level) while the same condition keeps repeating it, that is while it came again
// within repeatQuiet of its last time. The peer's loss and return, by name, and the node's quorum
// are said by the node's watcher (peers.go).
type nodeLog struct {
	l   *slog.Logger
	now func() time.Time // the clock, time.Now but in tests

	mu   sync.Mutex           // protects last
	last map[string]time.Time // a repeated condition's key -> when it was last seen

	// listenErr receives the first error of a fatal line: the server could not listen on a port.
	listenErr chan error
}

// repeatQuiet is how long a repeated condition must have been quiet for its line to be passed
// again: longer than the server's period of repeating any of them (1 s for a route, about 10 s
// for a stream without a quorum).
const repeatQuiet = 30 * time.Second

func newNodeLog(l *slog.Logger) *nodeLog {
	return &nodeLog{l: l, now: time.Now, last: map[string]time.Time{}, listenErr: make(chan error, 1)}
}

var (
	// "Error trying to connect to route (attempt 12): dial tcp 127.0.0.1:6223: connect: connection refused"
	routeErr     = regexp.MustCompile(`^Error trying to connect to route \(attempt \d+\): (.*)$`)
	routeErrAddr = regexp.MustCompile(`dial tcp ([^ ]+):`)
)

// repeated returns the key of a line that a lasting condition repeats, or "".
func repeated(msg string) string {
	if m := routeErr.FindStringSubmatch(msg); m != nil {
		if a := routeErrAddr.FindStringSubmatch(m[1]); a != nil {
			return "route " + a[1]
		}
		return "route " + m[1]
	}
	if strings.Contains(msg, "has NO quorum, stalled") {
		return msg
	}
	return ""
}

// connected says that a route to addr (host:port) is up: the next failure to connect to it is a
// change of state again.
func (n *nodeLog) connected(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.last, "route "+addr)
}

// pass reports whether msg goes to the logger at its level, or at debug level only.
func (n *nodeLog) pass(msg string) bool {
	key := repeated(msg)
	if key == "" {
		return true
	}
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	last, seen := n.last[key]
	n.last[key] = now
	for k, t := range n.last { // forget the conditions that ended
		if now.Sub(t) > repeatQuiet {
			delete(n.last, k)
		}
	}
	return !seen || now.Sub(last) > repeatQuiet
}

func (n *nodeLog) log(level slog.Level, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if level > slog.LevelDebug && !n.pass(msg) {
		level = slog.LevelDebug
	}
	n.l.Log(context.Background(), level, msg)
}

func (n *nodeLog) Noticef(format string, v ...any) { n.log(slog.LevelInfo, format, v...) }
func (n *nodeLog) Warnf(format string, v ...any)   { n.log(slog.LevelWarn, format, v...) }
func (n *nodeLog) Fatalf(format string, v ...any) {
	n.log(slog.LevelError, format, v...)
	err := errors.New(fmt.Sprintf(format, v...))
	for _, a := range v {
		if cause, ok := a.(error); ok { // the line's error, as it is, for errors.Is
			err = &lineError{msg: err.Error(), cause: cause}
			break
		}
	}
	select {
	case n.listenErr <- err:
	default:
	}
}

func (n *nodeLog) Errorf(format string, v ...any) { n.log(slog.LevelError, format, v...) }
func (n *nodeLog) Debugf(format string, v ...any) { n.log(slog.LevelDebug, format, v...) }
func (n *nodeLog) Tracef(format string, v ...any) { n.log(slog.LevelDebug, format, v...) }

// lineError is a log line's text, and the error it was about.
type lineError struct {
	msg   string
	cause error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.cause }
