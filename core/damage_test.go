package core_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// fillNote writes rows lines of 1 KiB into the note called name, enough that
// closing checkpoints its log into the database file and empties the log.
func fillNote(t *testing.T, ns *core.Namespace[*note], name string, rows int) {
	t.Helper()
	s, err := ns.Get(name)
	require.NoError(t, err)
	line := strings.Repeat("x", 1024)
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, n *note) error {
		if err := n.st.Storage().Put(ctx, "k", []byte("value of "+name)); err != nil {
			return err
		}
		for range rows {
			if _, err := n.st.Storage().Exec(ctx, "INSERT INTO lines(text) VALUES (?)", line); err != nil {
				return err
			}
		}
		return nil
	}))
}

// countLines reads every row of the note's table.
func countLines(ctx context.Context, ns *core.Namespace[*note], name string) (int, error) {
	s, err := ns.Get(name)
	if err != nil {
		return 0, err
	}
	return core.Call(ctx, s, func(ctx context.Context, n *note) (int, error) {
		var c int
		err := n.st.Storage().QueryRow(ctx, "SELECT count(*) FROM lines WHERE length(text) > 0").Scan(&c)
		return c, err
	})
}

// S-O3: damage that the first open's header checks cannot see (garbage over
// pages in the middle of a file) is still never served silently: a call that
// reads a damaged page fails with ErrDamaged naming the file, and the object
// refuses from then on; an object whose damaged pages no call reads is found
// by the background check, logged, and refuses from then on. A file that lost
// its tail is refused at its first open. Other objects keep serving.
func TestDamage_FoundWhileReadingAndInBackground(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	rt, ns := openNoteDir(t, dir)
	names := []string{"good", "readbad", "bgbad", "short"}
	for _, name := range names {
		fillNote(t, ns, name, 400)
	}
	require.NoError(t, rt.Close())
	file := func(name string) string { s, _ := ns.Get(name); return objectFile(dir, "notes", name, s) }
	for _, name := range names {
		fi, err := os.Stat(file(name) + "-wal")
		require.True(t, err != nil || fi.Size() == 0, "%s: the log was checkpointed at close", name)
	}
	for _, name := range []string{"readbad", "bgbad"} { // garbage over the last quarter of the pages
		b, err := os.ReadFile(file(name))
		require.NoError(t, err)
		for i := len(b) - len(b)/4/4096*4096; i < len(b); i++ {
			b[i] = 0xA5
		}
		require.NoError(t, os.WriteFile(file(name), b, 0o644))
	}
	fi, err := os.Stat(file("short"))
	require.NoError(t, err)
	require.NoError(t, os.Truncate(file("short"), fi.Size()/2/4096*4096))

	logs := newLogCapture()
	rt = openRuntime(t, core.Options{Dir: dir, Logger: slog.New(logs)})
	ns, err = core.Register(rt, "notes", newNote)
	require.NoError(t, err)

	// The truncated file: refused at its first open, by its header's page count.
	_, _, err = getNote(ctx, ns, "short", "k")
	require.ErrorIs(t, err, core.ErrDamaged)
	var de *core.DamagedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, file("short"), de.Path)
	require.Contains(t, de.Reason, "truncated")

	// Corruption met while reading is ErrDamaged, and the object refuses from then on.
	_, err = countLines(ctx, ns, "readbad")
	require.ErrorIs(t, err, core.ErrDamaged, "a corrupt page read is damage, not an SQL error")
	require.ErrorAs(t, err, &de)
	require.Equal(t, file("readbad"), de.Path)
	_, _, err = getNote(ctx, ns, "readbad", "k")
	require.ErrorIs(t, err, core.ErrDamaged, "refused from then on, even where its pages are sound")

	// Pages no call reads: the background check finds them.
	v, ok, err := getNote(ctx, ns, "bgbad", "k")
	require.NoError(t, err, "the first activation does not read the whole file")
	require.True(t, ok)
	require.Equal(t, "value of bgbad", v)
	rec, ok := logs.waitFor("event=damaged namespace=notes name=bgbad", hangGuard)
	require.True(t, ok, "the background check logs the damage: %v", logs.all())
	require.Contains(t, rec, "quick check")
	_, _, err = getNote(ctx, ns, "bgbad", "k")
	require.ErrorIs(t, err, core.ErrDamaged, "refused once the check found it")

	n, err := countLines(ctx, ns, "good")
	require.NoError(t, err, "other objects keep serving")
	require.Equal(t, 400, n)
	_, ok = logs.find("name=good")
	require.False(t, ok, "a sound file is not reported: %v", logs.all())

	// Quarantine lets the name start again, empty.
	_, err = rt.Admin().Quarantine(ctx, "notes", "bgbad")
	require.NoError(t, err)
	_, ok, err = getNote(ctx, ns, "bgbad", "k")
	require.NoError(t, err)
	require.False(t, ok, "a new, empty object")
}
