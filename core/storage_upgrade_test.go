package core_test

import (
	"context"
	"database/sql"
	"errors"
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

	// Rewrite the timers table as the earlier version made it, holding the alarm at `at`, and
	// clear the mark of a file whose runtime tables are up to date: the earlier version set no
	// user_version.
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
INSERT INTO _durable_timers VALUES ('', '', ?, 0, ?, '', NULL, '', 0);
PRAGMA user_version = 0`, at.UnixNano(), at.UnixNano())
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

// fileMark reads the user_version and the name record of the object database at path, as a
// runtime closed left it.
func fileMark(t *testing.T, path string) (mark int, name string) {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&mark))
	err = db.QueryRow("SELECT v FROM _durable_meta WHERE k = 'name'").Scan(&name)
	if err != sql.ErrNoRows {
		require.NoError(t, err)
	}
	return mark, name
}

// S-O2: a database's runtime tables are marked as set up (its user_version, which user SQL cannot
// set) by the commit that writes its name record, and only by it: the next open reads the mark
// alone. A first turn that fails leaves the file unmarked, and the next activation sets the tables
// up and marks them.
func TestStorage_MarkedWithItsNameRecord(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	fail := true
	open := func() (*core.Runtime, *core.Stub[*core.State]) {
		rt, err := core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		ns, err := core.Register(rt, "marks", func(ctx context.Context, st *core.State) (*core.State, error) {
			if err := st.Storage().Put(ctx, "k", []byte("v")); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("first constructor fails")
			}
			return st, nil
		})
		require.NoError(t, err)
		s, err := ns.Get("m")
		require.NoError(t, err)
		return rt, s
	}
	nop := func(context.Context, *core.State) error { return nil }

	rt, s := open()
	require.Error(t, core.Do(ctx, s, nop), "the constructor fails")
	require.NoError(t, rt.Close())
	path := filepath.Join(dir, "marks", s.ID()+".sqlite")
	mark, name := fileMark(t, path)
	require.Equal(t, 0, mark, "a file whose first turn failed is not marked")
	require.Empty(t, name, "and holds no name record")

	fail = false
	rt, s = open()
	require.NoError(t, core.Do(ctx, s, nop))
	require.NoError(t, rt.Close())
	mark, name = fileMark(t, path)
	require.Equal(t, 1, mark, "marked by the commit that set its tables up")
	require.Equal(t, "m", name)

	rt, s = open()
	defer rt.Close()
	v, err := core.Call(ctx, s, func(ctx context.Context, st *core.State) (string, error) {
		b, _, err := st.Storage().Get(ctx, "k")
		return string(b), err
	})
	require.NoError(t, err, "a marked file opens with its tables")
	require.Equal(t, "v", v)
}
