package core_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// note is an object that keeps values in its KV storage and a table.
type note struct{ st *core.State }

func newNote(ctx context.Context, st *core.State) (*note, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS lines(n INTEGER PRIMARY KEY, text TEXT NOT NULL)")
	return &note{st: st}, err
}

func (n *note) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	return n.st.Storage().Put(ctx, "fired", []byte(n.st.Now().UTC().Format(time.RFC3339Nano)))
}

func openNoteDir(t *testing.T, dir string) (*core.Runtime, *core.Namespace[*note]) {
	t.Helper()
	rt := openRuntime(t, core.Options{Dir: dir})
	ns, err := core.Register(rt, "notes", newNote)
	require.NoError(t, err)
	return rt, ns
}

func putNote(ctx context.Context, ns *core.Namespace[*note], name, key, value string) error {
	s, err := ns.Get(name)
	if err != nil {
		return err
	}
	return core.Do(ctx, s, func(ctx context.Context, n *note) error { return n.st.Storage().Put(ctx, key, []byte(value)) })
}

func getNote(ctx context.Context, ns *core.Namespace[*note], name, key string) (string, bool, error) {
	s, err := ns.Get(name)
	if err != nil {
		return "", false, err
	}
	var v []byte
	var ok bool
	err = core.Do(ctx, s, func(ctx context.Context, n *note) error {
		var err error
		v, ok, err = n.st.Storage().Get(ctx, key)
		return err
	})
	return string(v), ok, err
}

// objectFile is the path of a top-level object's database.
func objectFile(dir, ns, name string, stub interface{ ID() string }) string {
	return filepath.Join(dir, ns, stub.ID()+".sqlite")
}

// S-O1: a second Open of a directory held by a runtime of this process fails at
// once with a *LockedError naming the directory and this process; after Close
// the directory opens again.
func TestDataDir_LockInProcess(t *testing.T) {
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	start := time.Now()
	_, err = core.Open(core.Options{Dir: dir})
	require.ErrorIs(t, err, core.ErrLocked)
	require.Less(t, time.Since(start), time.Second, "fails at once, never waits")
	var le *core.LockedError
	require.ErrorAs(t, err, &le)
	abs, _ := filepath.Abs(dir)
	require.Equal(t, abs, le.Dir)
	require.Equal(t, os.Getpid(), le.PID)
	require.Contains(t, err.Error(), abs)
	require.Contains(t, err.Error(), strconv.Itoa(os.Getpid()))
	require.NoError(t, rt.Close())
	rt2, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err, "the lock goes with Close")
	require.NoError(t, rt2.Close())
}

// S-O1: a runtime held by another process: Open fails with its PID; once
// that process is killed (SIGKILL: no Close), the directory opens.
func TestDataDir_LockOtherProcess(t *testing.T) {
	if dir := os.Getenv("DURABLE_LOCK_CHILD"); dir != "" {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			fmt.Println("open failed:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute) // until killed
		rt.Close()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDir_LockOtherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DURABLE_LOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	require.Contains(t, string(buf[:n]), "locked", "the child holds the directory")

	_, err = core.Open(core.Options{Dir: dir})
	var le *core.LockedError
	require.ErrorAs(t, err, &le)
	require.Equal(t, cmd.Process.Pid, le.PID, "names the holder")
	require.ErrorIs(t, err, core.ErrLocked)

	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err, "the OS frees the lock of a killed process")
	require.NoError(t, rt.Close())
}

// S-O2: the catalog lists every object with storage, by name, a page at a
// time, from outside a turn, with its creation, activity and size; it
// survives a restart.
func TestDataDir_CatalogList(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rt, ns := openNoteDir(t, dir)
	var names []string
	for i := range 25 {
		name := fmt.Sprintf("n%02d", i)
		names = append(names, name)
		require.NoError(t, putNote(ctx, ns, name, "k", "v"))
	}
	// An object whose code never used storage has no database: not listed.
	other, err := core.Register(rt, "plain", func(context.Context, *core.State) (*struct{}, error) { return &struct{}{}, nil })
	require.NoError(t, err)
	ps, _ := other.Get("p")
	require.NoError(t, core.Do(ctx, ps, func(context.Context, *struct{}) error { return nil }))

	var got []string
	after := ""
	for {
		page, err := ns.List(ctx, core.ObjectListOptions{After: after, Limit: 10})
		require.NoError(t, err)
		for _, o := range page {
			got = append(got, o.Name)
			stub, _ := ns.Get(o.Name)
			require.Equal(t, stub.ID(), o.ID)
			require.False(t, o.Created.IsZero())
			require.False(t, o.LastActive.Before(o.Created))
		}
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].Name
	}
	require.Equal(t, names, got, "every object, in name order, across pages")
	plain, err := other.List(ctx, core.ObjectListOptions{})
	require.NoError(t, err)
	require.Empty(t, plain, "no storage, no entry")

	require.NoError(t, rt.Close())
	_, ns = openNoteDir(t, dir)
	var all []core.ObjectInfo
	for o, err := range ns.All(ctx) {
		require.NoError(t, err)
		all = append(all, o)
	}
	require.Len(t, all, 25, "the catalog survives a restart")
	require.Positive(t, all[0].Size, "the size as of the eviction at Close")
}

// S-O3: a known object whose database was truncated to 0 bytes, or deleted
// with its WAL, or garbled, refuses with ErrDamaged naming its file instead of
// serving as a new, empty object; other objects keep serving; Quarantine moves
// its files aside and the name starts again empty; Restore brings back an
// exported copy.
func TestDataDir_DamageDetected(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rt, ns := openNoteDir(t, dir)
	for _, name := range []string{"good", "zero", "gone", "garbled"} {
		require.NoError(t, putNote(ctx, ns, name, "k", "value of "+name))
	}
	var export strings.Builder
	_, err := rt.Admin().Export(ctx, "notes", "garbled", &export)
	require.NoError(t, err)
	exported := filepath.Join(t.TempDir(), "garbled.sqlite")
	require.NoError(t, os.WriteFile(exported, []byte(export.String()), 0o644))
	require.NoError(t, rt.Close())

	file := func(name string) string { s, _ := ns.Get(name); return objectFile(dir, "notes", name, s) }
	require.NoError(t, os.Truncate(file("zero"), 0))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(file("gone") + suffix)
	}
	garble(t, file("garbled"))

	rt, ns = openNoteDir(t, dir)
	for name, reason := range map[string]string{"zero": "empty", "gone": "missing", "garbled": ""} {
		_, _, err := getNote(ctx, ns, name, "k")
		require.ErrorIs(t, err, core.ErrDamaged, name)
		var de *core.DamagedError
		require.ErrorAs(t, err, &de, name)
		require.Equal(t, file(name), de.Path, "names the file")
		require.Contains(t, de.Reason, reason, name)
		_, _, err = getNote(ctx, ns, name, "k")
		require.ErrorIs(t, err, core.ErrDamaged, "%s: still refused, never served empty", name)
	}
	v, ok, err := getNote(ctx, ns, "good", "k")
	require.NoError(t, err, "other objects keep serving")
	require.True(t, ok)
	require.Equal(t, "value of good", v)

	// Quarantine: the files go aside, the name starts again empty.
	qdir, err := rt.Admin().Quarantine(ctx, "notes", "zero")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(qdir, filepath.Base(file("zero"))), "the file is kept, not deleted")
	_, ok, err = getNote(ctx, ns, "zero", "k")
	require.NoError(t, err)
	require.False(t, ok, "a new, empty object")

	// Restore: the exported copy comes back.
	require.NoError(t, rt.Admin().Restore(ctx, "notes", "garbled", exported))
	v, ok, err = getNote(ctx, ns, "garbled", "k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "value of garbled", v)
	_, err = os.Stat(filepath.Join(dir, "_quarantine", "notes"))
	require.NoError(t, err, "the garbled file was quarantined by Restore")

	// A file that is not a database is refused by Restore, and nothing is lost.
	bad := filepath.Join(t.TempDir(), "bad.sqlite")
	require.NoError(t, os.WriteFile(bad, []byte("not a database at all, not even close to one......."), 0o644))
	require.ErrorIs(t, rt.Admin().Restore(ctx, "notes", "good", bad), core.ErrDamaged)
	v, _, err = getNote(ctx, ns, "good", "k")
	require.NoError(t, err)
	require.Equal(t, "value of good", v)
}

// garble overwrites the middle of a database file (its WAL checkpointed in at
// Close) so that SQLite's quick check fails.
func garble(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for i := 100; i < len(b); i++ { // past the header: the schema and the pages
		b[i] = byte(i*7 + 3)
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
}

// S-O2: an object created and written after the last index write before a
// SIGKILL is in the catalog: it enters durably with its first commit.
func TestDataDir_CatalogAfterKill(t *testing.T) {
	if dir := os.Getenv("DURABLE_CATALOG_CHILD"); dir != "" {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			os.Exit(3)
		}
		ns, _ := core.Register(rt, "notes", newNote)
		for i := range 5 {
			if err := putNote(context.Background(), ns, fmt.Sprintf("k%d", i), "k", "v"); err != nil {
				os.Exit(4)
			}
		}
		fmt.Println("acked")
		time.Sleep(time.Minute)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDir_CatalogAfterKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DURABLE_CATALOG_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	require.Contains(t, string(buf[:n]), "acked")
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	_, ns := openNoteDir(t, dir)
	page, err := ns.List(context.Background(), core.ObjectListOptions{})
	require.NoError(t, err)
	require.Len(t, page, 5)
}

// S-O3: an object whose committed rows live only in its WAL (closing does
// not checkpoint a small log) and whose WAL header is damaged is refused
// with ErrDamaged, not served as an empty object: SQLite would ignore the
// log. An undamaged WAL opens with its rows.
func TestDataDir_DamagedWALHeaderRefused(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rt, ns := openNoteDir(t, dir)
	for _, name := range []string{"good", "bad"} {
		require.NoError(t, putNote(ctx, ns, name, "k", "value of "+name))
	}
	require.NoError(t, rt.Close())
	file := func(name string) string { s, _ := ns.Get(name); return objectFile(dir, "notes", name, s) }
	for _, name := range []string{"good", "bad"} {
		fi, err := os.Stat(file(name) + "-wal")
		require.NoError(t, err, "the rows are in the WAL")
		require.Greater(t, fi.Size(), int64(32), "the WAL holds frames")
	}
	f, err := os.OpenFile(file("bad")+"-wal", os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("garbage in the WAL header"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, ns = openNoteDir(t, dir)
	_, _, err = getNote(ctx, ns, "bad", "k")
	require.ErrorIs(t, err, core.ErrDamaged, "a damaged WAL header is not served as an empty object")
	var de *core.DamagedError
	require.ErrorAs(t, err, &de)
	require.Contains(t, de.Reason, "WAL")
	v, ok, err := getNote(ctx, ns, "good", "k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "value of good", v)
}
