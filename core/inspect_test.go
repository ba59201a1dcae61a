package core_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// jotter is a note with schedule entries.
type jotter struct{ *note }

func newJotter(ctx context.Context, st *core.State) (*jotter, error) {
	n, err := newNote(ctx, st)
	return &jotter{n}, err
}

func (p *jotter) OnTimer(context.Context, core.Timer, core.AlarmInfo) error { return nil }

// seedNotes writes notes n0..n(count-1), each with a line and a KV key; n0 has an alarm in an hour.
func seedNotes(t *testing.T, rt *core.Runtime, count int, at time.Time) *core.Namespace[*jotter] {
	t.Helper()
	ctx := context.Background()
	ns, err := core.Register(rt, "notes", newJotter)
	require.NoError(t, err)
	for i := range count {
		name := fmt.Sprintf("n%d", i)
		s, _ := ns.Get(name)
		require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *jotter) error {
			if err := n.st.Storage().Put(ctx, "k", []byte("value "+name)); err != nil {
				return err
			}
			_, err := n.st.Storage().Exec(ctx, "INSERT INTO lines(text) VALUES (?)", "line of "+name)
			if err == nil && i == 0 {
				err = n.st.SetAlarm(ctx, at)
			}
			if err == nil && i == 0 {
				err = n.st.ScheduleAt(ctx, "later", at.Add(time.Minute), "remind", []byte("p"))
			}
			return err
		}))
	}
	return ns
}

// S-O8: Inspect reports an object's tables (the runtime's marked), its alarm
// and timers with their retry state, and whether it is resident; an object
// without storage is ErrNoObject; the catalog's namespaces are listed.
func TestInspect_Report(t *testing.T) {
	ctx := context.Background()
	rt, err := core.Open(core.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer rt.Close()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	seedNotes(t, rt, 2, at)

	rep, err := rt.Admin().Inspect(ctx, "notes", "n0")
	require.NoError(t, err)
	require.Equal(t, "notes", rep.Namespace)
	require.Equal(t, "n0", rep.Name)
	require.True(t, rep.Resident)
	require.Positive(t, rep.Size)
	tables := map[string]core.TableInfo{}
	for _, tb := range rep.Tables {
		tables[tb.Name] = tb
	}
	require.Equal(t, []string{"n", "text"}, tables["lines"].Columns)
	require.Equal(t, int64(1), tables["lines"].Rows)
	require.False(t, tables["lines"].Runtime)
	require.True(t, tables["_durable_kv"].Runtime)
	require.Equal(t, int64(1), tables["_durable_kv"].Rows)
	require.True(t, at.Equal(rep.Alarm), "alarm %v, want %v", rep.Alarm, at)
	require.Len(t, rep.Timers, 2)
	require.Equal(t, "", rep.Timers[0].Key)
	require.Equal(t, "later", rep.Timers[1].Key)
	require.Equal(t, "remind", rep.Timers[1].Kind)
	require.Equal(t, 0, rep.Timers[1].Retries)
	require.False(t, rep.Timers[1].Running)

	_, err = rt.Admin().Inspect(ctx, "notes", "nobody")
	require.ErrorIs(t, err, core.ErrNoObject)
	nss, err := rt.Admin().Namespaces()
	require.NoError(t, err)
	require.Equal(t, []string{"notes"}, nss)
	objs, err := rt.Admin().Objects(ctx, "notes", core.ObjectListOptions{After: "n0"})
	require.NoError(t, err)
	require.Len(t, objs, 1)
	require.Equal(t, "n1", objs[0].Name)
}

// S-O8: a read-only query sees the object's committed data, the runtime's
// tables included, a page at a time; every statement that would write (DML,
// DDL, ATTACH, a transaction, a setting PRAGMA, VACUUM INTO) fails with
// ErrReadOnly and changes nothing.
func TestQuery_ReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	defer rt.Close()
	ns := seedNotes(t, rt, 1, time.Now().Add(time.Hour))
	s, _ := ns.Get("n0")
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *jotter) error {
		for i := range 5 {
			if _, err := n.st.Storage().Exec(ctx, "INSERT INTO lines(text) VALUES (?)", fmt.Sprint("more ", i)); err != nil {
				return err
			}
		}
		return nil
	}))

	res, err := rt.Admin().Query(ctx, "notes", "n0", 4, "SELECT n, text FROM lines ORDER BY n")
	require.NoError(t, err)
	require.Equal(t, []string{"n", "text"}, res.Columns)
	require.Len(t, res.Rows, 4)
	require.True(t, res.Truncated)
	require.Equal(t, []any{int64(1), "line of n0"}, res.Rows[0])
	res, err = rt.Admin().Query(ctx, "notes", "n0", 0, "SELECT value FROM _durable_kv WHERE key = ?", "k")
	require.NoError(t, err)
	require.False(t, res.Truncated)
	require.Equal(t, [][]any{{[]byte("value n0")}}, res.Rows)
	_, err = rt.Admin().Query(ctx, "notes", "n0", 0, "SELECT ?")
	require.ErrorIs(t, err, core.ErrArgCount)

	snapshot := func() [][]any {
		r, err := rt.Admin().Query(ctx, "notes", "n0", 0, "SELECT type, name, sql FROM sqlite_schema UNION ALL SELECT 'row', n, text FROM lines UNION ALL SELECT 'kv', key, value FROM _durable_kv UNION ALL SELECT 'timer', key, at FROM _durable_timers UNION ALL SELECT 'user_version', user_version, NULL FROM pragma_user_version ORDER BY 1, 2")
		require.NoError(t, err)
		return r.Rows
	}
	before := snapshot()
	for _, q := range []string{
		"INSERT INTO lines(text) VALUES ('x')",
		"UPDATE lines SET text = 'x'",
		"DELETE FROM lines",
		"DELETE FROM _durable_timers",
		"INSERT INTO _durable_kv VALUES ('x', x'00')",
		"CREATE TABLE t(x)",
		"CREATE TEMP TABLE t(x)",
		"DROP TABLE lines",
		"ALTER TABLE lines ADD COLUMN y",
		"CREATE INDEX i ON lines(text)",
		"ATTACH DATABASE '" + filepath.Join(dir, "other.sqlite") + "' AS other",
		"PRAGMA user_version = 7",
		"PRAGMA journal_mode = DELETE",
		"BEGIN",
		"SELECT 1; DELETE FROM lines",
		"VACUUM INTO '" + filepath.Join(dir, "copy.sqlite") + "'",
		"REPLACE INTO lines(n, text) VALUES (1, 'x')",
		"WITH x AS (SELECT 1) INSERT INTO lines(text) SELECT 'x' FROM x",
	} {
		_, err := rt.Admin().Query(ctx, "notes", "n0", 0, q)
		require.ErrorIs(t, err, core.ErrReadOnly, "%s", q)
	}
	require.Equal(t, before, snapshot())
	for _, f := range []string{"other.sqlite", "copy.sqlite"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.True(t, errors.Is(err, os.ErrNotExist), "%s was created", f)
	}
	// The object still serves and writes as before.
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *jotter) error { return n.st.Storage().Put(ctx, "k2", []byte("v")) }))
}

// S-O8: a runtime that has not registered the namespace (a tool on a
// directory no server holds) reads the objects straight from their files, and
// fires none of their alarms.
func TestInspect_Unregistered(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	seedNotes(t, rt, 3, time.Now().Add(time.Hour))
	ns, _ := core.Register(rt, "late", newNote)
	s, _ := ns.Get("x")
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error { return n.st.Storage().Put(ctx, "a", []byte("b")) }))
	require.NoError(t, rt.Close())

	rt, err = core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	defer rt.Close()
	rep, err := rt.Admin().Inspect(ctx, "notes", "n2")
	require.NoError(t, err)
	require.False(t, rep.Resident)
	require.True(t, slices.ContainsFunc(rep.Tables, func(tb core.TableInfo) bool { return tb.Name == "lines" && tb.Rows == 1 }))
	res, err := rt.Admin().Query(ctx, "notes", "n2", 0, "SELECT text FROM lines")
	require.NoError(t, err)
	require.Equal(t, [][]any{{"line of n2"}}, res.Rows)
	_, err = rt.Admin().Query(ctx, "notes", "n2", 0, "DELETE FROM lines")
	require.ErrorIs(t, err, core.ErrReadOnly)
	nss, err := rt.Admin().Namespaces()
	require.NoError(t, err)
	require.Equal(t, []string{"late", "notes"}, nss)
	objs, err := rt.Admin().Objects(ctx, "notes", core.ObjectListOptions{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"n0", "n1"}, []string{objs[0].Name, objs[1].Name})
	problems, err := rt.Admin().Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// S-O8: Check finds a damaged object database, a missing one, and an alarm
// index that disagrees with an object's timers; a sound directory has no
// problem.
func TestCheck_FindsDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	ns := seedNotes(t, rt, 3, time.Now().Add(time.Hour))
	problems, err := rt.Admin().Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	infos, err := ns.List(ctx, core.ObjectListOptions{})
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	file := func(name string) string {
		i := slices.IndexFunc(infos, func(o core.ObjectInfo) bool { return o.Name == name })
		return filepath.Join(dir, "notes", infos[i].ID+".sqlite")
	}
	// n1: garbage over its pages; n2: gone; n0: its alarm deleted behind the index's back.
	b, err := os.ReadFile(file("n1"))
	require.NoError(t, err)
	for i := 4096; i < len(b); i++ {
		b[i] = 0xA5
	}
	require.NoError(t, os.WriteFile(file("n1"), b, 0o644))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(file("n2") + suffix)
	}
	db, err := sql.Open("sqlite", file("n0"))
	require.NoError(t, err)
	_, err = db.Exec("UPDATE _durable_timers SET at = at + 1000")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	rt, err = core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	defer rt.Close()
	problems, err = rt.Admin().Check(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for _, p := range problems {
		got[p.Name] = p.Problem
	}
	require.Len(t, got, 3, "%v", problems)
	require.Contains(t, got["n2"], "missing")
	require.NotEmpty(t, got["n1"])
	require.Contains(t, got["n0"], "the alarm index says")
}

// S-O6, S-O8: Rearm works on a directory whose namespace this runtime has not
// registered: no constructor runs, the timer is written to the object's
// database with its retries reset, the index agrees, the letter is gone.
func TestRearm_Unregistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		rt, err := core.Open(core.Options{Dir: dir, AlarmRetry: core.RetryPolicy{MaxRetries: -1}, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		fns, err := core.Register(rt, "failers", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
		require.NoError(t, err)
		fs, _ := fns.Get("f")
		require.NoError(t, core.Do(ctx, fs, func(ctx context.Context, f *failer) error { return f.st.SetAlarm(ctx, time.Now()) }))
		time.Sleep(time.Second)
		synctest.Wait()
		dls, err := rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.NoError(t, rt.Close())

		rt, err = core.Open(core.Options{Dir: dir})
		require.NoError(t, err)
		defer rt.Close()
		at := time.Now().Add(time.Hour)
		require.NoError(t, rt.Admin().Rearm(ctx, dls[0].Seq, at))
		left, err := rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Empty(t, left)
		rep, err := rt.Admin().Inspect(ctx, "failers", "f")
		require.NoError(t, err)
		require.True(t, at.Equal(rep.Alarm), "alarm %v, want %v", rep.Alarm, at)
		require.Equal(t, 0, rep.Timers[0].Retries)
		problems, err := rt.Admin().Check(ctx)
		require.NoError(t, err)
		require.Empty(t, problems)
	})
}

// S-O8, S-F1: a facet is inspected like an object: its kind is listed as a
// namespace of the catalog, and its own database is read.
func TestInspect_Facet(t *testing.T) {
	ctx := context.Background()
	w := openFacets(t, core.Options{Dir: t.TempDir(), IdleTimeout: time.Hour})
	a := w.facet(t, "ws", "a")
	require.NoError(t, core.Do(ctx, a, func(ctx context.Context, p *processor) error {
		_, err := p.st.Storage().Exec(ctx, "INSERT INTO beat(at) VALUES (7)")
		return err
	}))
	nss, err := w.rt.Admin().Namespaces()
	require.NoError(t, err)
	require.Contains(t, nss, "workspaces.proc")
	objs, err := w.rt.Admin().Objects(ctx, "workspaces.proc", core.ObjectListOptions{})
	require.NoError(t, err)
	require.Len(t, objs, 1)
	rep, err := w.rt.Admin().Inspect(ctx, "workspaces.proc", objs[0].Name)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(rep.Tables, func(tb core.TableInfo) bool { return tb.Name == "beat" && tb.Rows == 1 }), "%+v", rep.Tables)
	res, err := w.rt.Admin().Query(ctx, "workspaces.proc", objs[0].Name, 0, "SELECT at FROM beat")
	require.NoError(t, err)
	require.Equal(t, [][]any{{int64(7)}}, res.Rows)

	// A backup copies the resident facet's database through its gate (it holds its file alone),
	// and the facet serves on.
	require.NoError(t, core.Do(ctx, a, func(ctx context.Context, p *processor) error {
		_, err := p.st.Storage().Exec(ctx, "INSERT INTO beat(at) VALUES (8)")
		return err
	}))
	dst := filepath.Join(t.TempDir(), "backup")
	p, err := w.rt.Admin().Backup(ctx, dst, core.BackupOptions{})
	require.NoError(t, err)
	require.Zero(t, p.Skipped)
	copied := openFacets(t, core.Options{Dir: dst})
	require.Equal(t, 2, beats(t, copied.facet(t, "ws", "a")), "the copy holds the facet's last commit")
	require.Equal(t, 2, beats(t, a))
}
