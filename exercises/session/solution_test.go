//go:build exercises && solution

package session_test

import (
	"context"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
)

// The tests' target with -tags solution: the reference solution.

type Session = session.Session

var errNotFound = session.ErrNotFound

func newSession(ttl time.Duration) func(context.Context, *core.State) (*Session, error) {
	return session.Options{TTL: ttl}.New
}
