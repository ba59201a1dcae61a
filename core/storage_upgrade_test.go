package core_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-A1: an object whose database was made by an earlier version, with a
// timers table that has no running column, keeps its alarm: the table is
// brought up to date when the database opens, and the alarm can be read
// and set again.
func TestStorage_TimersTableFromEarlierVersion(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	stub := func(rt *core.Runtime) *core.Stub[*clock] {
		c := openClocksIn(t, rt)
		s, err := c.ns.Get("old")
		require.NoError(t, err)
		return s
	}

	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	s := stub(rt)
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, c *clock) error { return c.st.SetAlarm(ctx, at.Add(time.Hour)) }))
	require.NoError(t, rt.Close())

	// Rewrite the timers table as the earlier version made it, holding the alarm at `at`.
	files, err := filepath.Glob(filepath.Join(dir, "clocks", "*.sqlite"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: files[0]}).String())
	require.NoError(t, err)
	_, err = db.Exec(`DROP TABLE _durable_timers;
CREATE TABLE _durable_timers(owner TEXT NOT NULL, key TEXT NOT NULL,
  at INTEGER NOT NULL, retry INTEGER NOT NULL, first INTEGER NOT NULL,
  kind TEXT NOT NULL, payload BLOB, cron TEXT NOT NULL, missed INTEGER NOT NULL,
  PRIMARY KEY(owner, key)) WITHOUT ROWID;
CREATE INDEX _durable_timers_at ON _durable_timers(at);
INSERT INTO _durable_timers VALUES ('', '', ?, 0, ?, '', NULL, '', 0)`, at.UnixNano(), at.UnixNano())
	require.NoError(t, err)
	require.NoError(t, db.Close())

	rt, err = core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	defer rt.Close()
	s = stub(rt)
	got, err := core.Call(ctx, s, func(ctx context.Context, c *clock) (time.Time, error) {
		at, _, err := c.st.GetAlarm(ctx)
		return at, err
	})
	require.NoError(t, err)
	if !got.Equal(at) {
		t.Fatalf("alarm after the upgrade: got %v, want %v", got, at)
	}
	later := at.Add(time.Minute)
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, c *clock) error { return c.st.SetAlarm(ctx, later) }))
	got, err = core.Call(ctx, s, func(ctx context.Context, c *clock) (time.Time, error) {
		at, _, err := c.st.GetAlarm(ctx)
		return at, err
	})
	require.NoError(t, err)
	if !got.Equal(later) {
		t.Fatalf("alarm set after the upgrade: got %v, want %v", got, later)
	}
}

// openClocksIn registers the clocks namespace (no handler) on rt.
func openClocksIn(t *testing.T, rt *core.Runtime) *clockNS {
	t.Helper()
	l := &log{}
	ns, err := core.Register(rt, "clocks", func(ctx context.Context, st *core.State) (*clock, error) {
		return &clock{st: st, log: l}, nil
	})
	require.NoError(t, err)
	return &clockNS{rt: rt, ns: ns, log: l}
}

// S-A1: a database from before the runtime's meta table (its own tables
// and the user's, no _durable_meta) opens on the path that reads it in two
// statements: the user's rows are kept, the runtime's tables are set up
// again, and the object's alarm can be set and read back across a restart,
// on the one-statement path.
func TestStorage_DatabaseWithoutMetaTable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var s *core.Stub[*clock]
	open := func() *core.Runtime {
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		s, err = openClocksIn(t, rt).ns.Get("old")
		require.NoError(t, err)
		return rt
	}
	rows := func() int {
		n, err := core.Call(ctx, s, func(ctx context.Context, c *clock) (int, error) {
			var n int
			err := c.st.Storage().QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n)
			return n, err
		})
		require.NoError(t, err)
		return n
	}

	rt := open()
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, c *clock) error {
		_, err := c.st.Storage().Exec(ctx, "CREATE TABLE kept(v); INSERT INTO kept VALUES (1), (2)")
		return err
	}))
	require.NoError(t, rt.Close())

	files, err := filepath.Glob(filepath.Join(dir, "clocks", "*.sqlite"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: files[0]}).String())
	require.NoError(t, err)
	_, err = db.Exec("DROP TABLE _durable_meta")
	require.NoError(t, err)
	require.NoError(t, db.Close())

	rt = open()
	require.Equal(t, 2, rows())
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, c *clock) error { return c.st.SetAlarm(ctx, at) }))
	require.NoError(t, rt.Close())

	rt = open()
	defer rt.Close()
	require.Equal(t, 2, rows())
	got, err := core.Call(ctx, s, func(ctx context.Context, c *clock) (time.Time, error) {
		at, _, err := c.st.GetAlarm(ctx)
		return at, err
	})
	require.NoError(t, err)
	if !got.Equal(at) {
		t.Fatalf("alarm after the restart: got %v, want %v", got, at)
	}
}
