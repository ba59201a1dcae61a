package session_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/patterns/session"
	"github.com/stretchr/testify/require"
)

// Sessions and links written by the constructors of before migrations
// (which ran step 1 themselves) open with their data and deadlines.
func TestSession_OpensDataWrittenBeforeMigrations(t *testing.T) {
	dir := t.TempDir()
	deadline := time.Now().Add(time.Hour)
	coretest.Seed(t, dir, "sessions", "s-1", `CREATE TABLE IF NOT EXISTS session_data(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_deadline(id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL)`,
		fmt.Sprintf("INSERT INTO session_data VALUES ('cart', x'6170706c65'); INSERT INTO session_deadline VALUES (1, %d)", deadline.UnixNano()))
	coretest.Seed(t, dir, "links", "abc", `CREATE TABLE IF NOT EXISTS link(id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT, expires_at INTEGER)`,
		"INSERT INTO link VALUES (1, 'https://example.com/', NULL)")

	rt := coretest.Open(t, core.Options{Dir: dir})
	sessions, err := core.Register(rt, "sessions", session.New)
	require.NoError(t, err)
	links, err := core.Register(rt, "links", session.NewLink)
	require.NoError(t, err)
	s, err := sessions.Get("s-1")
	require.NoError(t, err)
	cart, err := core.Call(context.Background(), s, func(ctx context.Context, s *session.Session) (string, error) {
		at, ok, err := s.Deadline(ctx)
		require.True(t, ok)
		require.Equal(t, deadline.UnixNano(), at.UnixNano())
		v, gerr := s.Get(ctx, "cart")
		return string(v), errors.Join(err, gerr)
	})
	require.NoError(t, err)
	require.Equal(t, "apple", cart)
	l, err := links.Get("abc")
	require.NoError(t, err)
	target, err := core.Call(context.Background(), l, func(ctx context.Context, l *session.Link) (string, error) { return l.Resolve(ctx) })
	require.NoError(t, err)
	require.Equal(t, "https://example.com/", target)
}
