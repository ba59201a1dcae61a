//go:build exercises && !solution

package session_test

import (
	"context"
	"time"

	"github.com/durable-go/durable/core"
	ex "github.com/durable-go/durable/exercises/session"
)

// The tests' target: your answer. With -tags solution they run against
// patterns/session instead (solution_test.go).

type Session = ex.Session

var errNotFound = ex.ErrNotFound

func newSession(ttl time.Duration) func(context.Context, *core.State) (*Session, error) {
	return ex.Options{TTL: ttl}.New
}
