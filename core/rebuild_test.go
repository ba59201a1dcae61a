package core_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/durable-go/durable/core"
)

// failer is an object whose alarm always fails.
type failer struct{ st *core.State }

func (f *failer) Alarm(context.Context, core.AlarmInfo) error { return errors.New("always fails") }

// S-O4, S-A5: the runtime's file is derived state. Deleted (with its WAL),
// truncated to 0 bytes or garbled, it is rebuilt at Open from the objects'
// own tables: every pending alarm still fires, the dead letter is still
// listed, the catalog still lists every object; a damaged file is moved
// aside, never deleted; the rebuild is in the log.
func TestIndex_RebuiltWhenLost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, path string)
		asideOK bool // the old file is moved aside
	}{
		{"deleted", func(t *testing.T, path string) {
			for _, s := range []string{"", "-wal", "-shm"} {
				os.Remove(path + s)
			}
		}, false},
		{"truncated", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, 0)) }, true},
		{"garbled", garble, true},
		{"not a database", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("this is not an SQLite database file, not even close."), 0o644))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				dir := t.TempDir()
				open := func(logger *slog.Logger) (*core.Runtime, *core.Namespace[*note]) {
					rt, err := core.Open(core.Options{Dir: dir, Logger: logger, AlarmRetry: core.RetryPolicy{MaxRetries: -1}})
					require.NoError(t, err)
					ns, err := core.Register(rt, "notes", newNote)
					require.NoError(t, err)
					_, err = core.Register(rt, "failers", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
					require.NoError(t, err)
					return rt, ns
				}
				rt, ns := open(slog.New(slog.DiscardHandler))
				t0 := time.Now()
				for i := range 5 {
					s, _ := ns.Get(fmt.Sprintf("n%d", i))
					require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error {
						return n.st.SetAlarm(ctx, t0.Add(time.Duration(i+1)*time.Minute))
					}))
				}
				dls, err := rt.Admin().DeadLetters()
				require.NoError(t, err)
				require.Empty(t, dls)
				fns, _ := core.Register(rt, "failers2", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
				fstub, _ := fns.Get("f")
				require.NoError(t, core.Do(ctx, fstub, func(ctx context.Context, f *failer) error { return f.st.SetAlarm(ctx, t0) }))
				time.Sleep(time.Second)
				synctest.Wait()
				dls, err = rt.Admin().DeadLetters()
				require.NoError(t, err)
				require.Len(t, dls, 1, "the failing alarm is a dead letter")
				require.NoError(t, rt.Close())

				path := filepath.Join(dir, "_runtime.sqlite")
				tc.damage(t, path)

				logs := newLogCapture()
				rt, ns = open(slog.New(logs))
				_, err = core.Register(rt, "failers2", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
				require.NoError(t, err)
				rec, ok := logs.find("event=index_rebuilt")
				require.True(t, ok, "the rebuild is logged: %v", logs.all())
				require.Contains(t, rec, "alarms=5")
				require.Contains(t, rec, "dead_letters=1")
				aside, _ := filepath.Glob(path + ".damaged-*")
				if tc.asideOK {
					require.NotEmpty(t, aside, "the damaged file is kept")
				}

				dls, err = rt.Admin().DeadLetters()
				require.NoError(t, err)
				require.Len(t, dls, 1, "the dead letter survives")
				require.Equal(t, "failers2", dls[0].Namespace)
				require.EqualValues(t, 5, rt.Stats().Alarms, "every alarm is pending again")
				page, err := ns.List(ctx, core.ObjectListOptions{})
				require.NoError(t, err)
				require.Len(t, page, 5, "the catalog is rebuilt")

				time.Sleep(6 * time.Minute)
				synctest.Wait()
				for i := range 5 {
					v, ok, err := getNote(ctx, ns, fmt.Sprintf("n%d", i), "fired")
					require.NoError(t, err)
					require.True(t, ok, "alarm %d fired", i)
					at, _ := time.Parse(time.RFC3339Nano, v)
					require.True(t, at.Equal(t0.Add(time.Duration(i+1)*time.Minute)), "on time: %v", at)
				}
				require.NoError(t, rt.Close())
			})
		})
	}
}

// S-O4: a runtime file of an earlier version (no catalog table) keeps its
// alarms and gets its catalog filled from the objects.
func TestIndex_CatalogFilledForOldFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rt, ns := openNoteDir(t, dir)
	require.NoError(t, putNote(ctx, ns, "a", "k", "v"))
	require.NoError(t, putNote(ctx, ns, "b", "k", "v"))
	require.NoError(t, rt.Close())
	dropCatalog(t, filepath.Join(dir, "_runtime.sqlite"))
	_, ns = openNoteDir(t, dir)
	page, err := ns.List(ctx, core.ObjectListOptions{})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, "a", page[0].Name)
}

// dropCatalog removes the catalog table from a runtime file, as an earlier version wrote it.
func dropCatalog(t *testing.T, path string) {
	t.Helper()
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("DROP TABLE objects")
	require.NoError(t, err)
}

func sqlOpen(path string) (*sql.DB, error) { return sql.Open("sqlite", "file:"+path) }

// S-O4, S-F3: a facet's alarm (a row of its root's timers table) fires after
// the runtime's file is deleted and rebuilt.
func TestIndex_RebuiltFacetAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		w := openFacets(t, core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		p := w.facet(t, "ws", "a")
		due := time.Now().Add(time.Minute)
		require.NoError(t, core.Do(context.Background(), p, func(ctx context.Context, pr *processor) error { return pr.st.SetAlarm(ctx, due) }))
		require.NoError(t, w.rt.Close())
		for _, s := range []string{"", "-wal", "-shm"} {
			os.Remove(filepath.Join(dir, "_runtime.sqlite") + s)
		}
		w2 := openFacets(t, core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		fires := facetLog.of("alarm")
		require.Len(t, fires, 1, "the facet's alarm fires")
		require.Equal(t, due, fires[0].at)
		require.Equal(t, 1, beats(t, w2.facet(t, "ws", "a")))
	})
}
