package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// notes is an object whose schema comes from the migration steps a test
// gives it.
type notes struct{ st *core.State }

// openNotes opens a runtime on dir whose "notes" objects migrate with
// steps in their constructor.
func openNotes(t *testing.T, dir string, steps ...core.Migration) (*core.Runtime, *core.Stub[*notes]) {
	t.Helper()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	ns, err := core.Register(rt, "notes", func(ctx context.Context, st *core.State) (*notes, error) {
		return &notes{st: st}, st.Storage().Migrate(ctx, steps...)
	})
	require.NoError(t, err)
	s, err := ns.Get("n")
	require.NoError(t, err)
	return rt, s
}

func columns(t *testing.T, s *core.Stub[*notes], table string) []string {
	t.Helper()
	cols, err := core.Call(context.Background(), s, func(ctx context.Context, n *notes) ([]string, error) {
		rows, err := n.st.Storage().Query(ctx, "SELECT name FROM pragma_table_info(?)", table)
		if err != nil {
			return nil, err
		}
		var out []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, rows.Err()
	})
	require.NoError(t, err)
	return cols
}

// Migrate runs each step once, in order, in the constructor's turn; the
// version survives restarts; a step added later runs once on the next
// activation; the runtime's record cannot be touched by user SQL.
func TestMigrate_StepsRunOnceInOrder(t *testing.T) {
	dir := t.TempDir()
	var ran []int
	step := func(n int, q string) core.Migration {
		return func(ctx context.Context, s *core.Storage) error {
			ran = append(ran, n)
			return core.SQL(q)(ctx, s)
		}
	}
	v1 := step(1, "CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
	v2 := step(2, "INSERT INTO note(body) VALUES ('welcome')")
	rt, s := openNotes(t, dir, v1, v2)
	require.Equal(t, []string{"id", "body"}, columns(t, s, "note"))
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, n *notes) error {
		_, err := n.st.Storage().Exec(ctx, "DELETE FROM _durable_migrations")
		require.ErrorIs(t, err, core.ErrSQLNotAllowed)
		_, err = n.st.Storage().Exec(ctx, "PRAGMA user_version = 7")
		require.ErrorIs(t, err, core.ErrSQLNotAllowed)
		return nil
	}))
	require.NoError(t, rt.Close())
	require.Equal(t, []int{1, 2}, ran)

	v3 := step(3, "ALTER TABLE note ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
	rt, s = openNotes(t, dir, v1, v2, v3)
	require.Equal(t, []string{"id", "body", "pinned"}, columns(t, s, "note"))
	require.NoError(t, rt.Close())
	rt, s = openNotes(t, dir, v1, v2, v3)
	body, err := core.Call(context.Background(), s, func(ctx context.Context, n *notes) (string, error) {
		var b string
		return b, n.st.Storage().One(ctx, "SELECT body FROM note WHERE pinned = 0").Scan(&b)
	})
	require.NoError(t, err)
	require.Equal(t, "welcome", body, "step 2 ran once")
	require.Equal(t, []int{1, 2, 3}, ran, "each step once, over three activations")
	require.NoError(t, rt.Close())
}

// A failing step leaves no step of its run applied, and the constructor's
// error names the version; the next activation tries again.
func TestMigrate_FailingStepAppliesNothing(t *testing.T) {
	dir := t.TempDir()
	v1 := core.SQL("CREATE TABLE note(id INTEGER PRIMARY KEY)")
	bad := core.SQL("ALTER TABLE nosuch ADD COLUMN x")
	rt, s := openNotes(t, dir, v1, bad)
	err := core.Do(context.Background(), s, func(context.Context, *notes) error { return nil })
	require.ErrorContains(t, err, "to version 2")
	require.ErrorContains(t, err, "no such table: nosuch")
	require.NoError(t, rt.Close()) // one runtime per directory (S-O1)

	rt, s = openNotes(t, dir, v1)
	require.Equal(t, []string{"id"}, columns(t, s, "note"), "step 1 ran again: the failed run left nothing")
	require.NoError(t, rt.Close())
}

// Data written by newer code (a higher version than the steps known) is
// refused with ErrSchemaTooNew, and left as it is.
func TestMigrate_StoredVersionNewerThanCode(t *testing.T) {
	dir := t.TempDir()
	v1 := core.SQL("CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT)")
	v2 := core.SQL("ALTER TABLE note ADD COLUMN pinned INTEGER")
	rt, s := openNotes(t, dir, v1, v2)
	require.Equal(t, []string{"id", "body", "pinned"}, columns(t, s, "note"))
	require.NoError(t, rt.Close())

	rt, s = openNotes(t, dir, v1)
	err := core.Do(context.Background(), s, func(context.Context, *notes) error { return nil })
	require.ErrorIs(t, err, core.ErrSchemaTooNew)
	require.ErrorContains(t, err, "version 2, the code knows 1")
	require.NoError(t, rt.Close())

	rt, s = openNotes(t, dir, v1, v2)
	require.Equal(t, []string{"id", "body", "pinned"}, columns(t, s, "note"), "nothing changed")
	require.NoError(t, rt.Close())
	_, s = openNotes(t, t.TempDir(), v1, nil)
	err = core.Do(context.Background(), s, func(context.Context, *notes) error { return nil })
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

// A directory written by a constructor that ran CREATE TABLE IF NOT EXISTS
// (before it used Migrate) opens with that statement as step 1: the data is
// kept and the steps after it run.
func TestMigrate_AdoptsASchemaMadeWithoutIt(t *testing.T) {
	dir := t.TempDir()
	const oldSchema = `CREATE TABLE IF NOT EXISTS note(id INTEGER PRIMARY KEY, body TEXT NOT NULL)`
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	ns, err := core.Register(rt, "notes", func(ctx context.Context, st *core.State) (*notes, error) {
		_, err := st.Storage().Exec(ctx, oldSchema)
		return &notes{st: st}, err
	})
	require.NoError(t, err)
	old := mustGet(t, ns, "n")
	require.NoError(t, core.Do(context.Background(), old, func(ctx context.Context, n *notes) error {
		_, err := n.st.Storage().Exec(ctx, "INSERT INTO note(body) VALUES ('kept')")
		return err
	}))
	require.NoError(t, rt.Close())

	rt, s := openNotes(t, dir, core.SQL(oldSchema), core.SQL("ALTER TABLE note ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"))
	body, err := core.Call(context.Background(), s, func(ctx context.Context, n *notes) (string, error) {
		var b string
		return b, n.st.Storage().One(ctx, "SELECT body FROM note WHERE pinned = 0").Scan(&b)
	})
	require.NoError(t, err)
	require.Equal(t, "kept", body)
	require.NoError(t, rt.Close())
}

// After DeleteAll the steps run again on the next activation: the record
// of applied steps goes with the tables.
func TestMigrate_AfterDeleteAll(t *testing.T) {
	var runs int
	v1 := func(ctx context.Context, s *core.Storage) error {
		runs++
		return core.SQL("CREATE TABLE note(id INTEGER PRIMARY KEY)")(ctx, s)
	}
	rt, s := openNotes(t, t.TempDir(), v1)
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, n *notes) error {
		err := n.st.Storage().DeleteAll(ctx)
		return errors.Join(err, n.st.Storage().Migrate(ctx, v1)) // in the same turn, too
	}))
	require.Equal(t, []string{"id"}, columns(t, s, "note"))
	require.Equal(t, 2, runs)
	require.NoError(t, rt.Close())
}
