package core_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-O6, S-A5: an object whose constructor always fails, with a due alarm:
// each fire counts as a failed run on the alarm's retry ladder (2 s, 4 s,
// ... 64 s), and after the last one the alarm is a dead letter, reported
// once; nothing runs after that.
func TestCtorFail_DeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		var broken atomic.Bool
		var ctors atomic.Int64
		var dropped []core.DeadLetter
		open := func() (*core.Runtime, *core.Namespace[*note]) {
			rt, err := core.Open(core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), AlarmRetry: core.RetryPolicy{Jitter: -1},
				OnAlarmDropped: func(dl core.DeadLetter) { dropped = append(dropped, dl) }})
			require.NoError(t, err)
			ns, err := core.Register(rt, "notes", func(ctx context.Context, st *core.State) (*note, error) {
				if broken.Load() {
					ctors.Add(1)
					return nil, errors.New("constructor broken")
				}
				return newNote(ctx, st)
			})
			require.NoError(t, err)
			return rt, ns
		}
		rt, ns := open()
		s, _ := ns.Get("o")
		t0 := time.Now()
		require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error { return n.st.SetAlarm(ctx, t0.Add(time.Second)) }))
		require.NoError(t, rt.Close()) // evicted: the next fire constructs
		broken.Store(true)
		rt, _ = open()
		defer rt.Close()

		time.Sleep(time.Second + 126*time.Second + time.Second) // the first run and the 126 s of the ladder
		synctest.Wait()
		require.EqualValues(t, 7, ctors.Load(), "one run and 6 retries")
		dls, err := rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, 7, dls[0].Attempts)
		require.Contains(t, dls[0].LastError, "constructor broken")
		require.True(t, dls[0].Scheduled.Equal(t0.Add(time.Second)))
		require.Len(t, dropped, 1, "reported once")

		time.Sleep(time.Hour)
		synctest.Wait()
		require.EqualValues(t, 7, ctors.Load(), "never retried for ever")
		require.EqualValues(t, 0, rt.Stats().Alarms)
	})
}

// S-O6: Rearm arms a dead letter's timer once. A letter written twice (an
// earlier version, or a crash between the letter and the object's commit) is
// one letter; a Rearm whose removal of the letter was lost (the letter is
// back) only removes it: the alarm does not run a second time.
func TestCtorFail_RearmOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		var runs atomic.Int64
		open := func() (*core.Runtime, *core.Namespace[*countingFailer]) {
			rt, err := core.Open(core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), AlarmRetry: core.RetryPolicy{MaxRetries: -1}})
			require.NoError(t, err)
			ns, err := core.Register(rt, "failers", func(_ context.Context, st *core.State) (*countingFailer, error) {
				return &countingFailer{st: st, runs: &runs}, nil
			})
			require.NoError(t, err)
			return rt, ns
		}
		rt, fs := open()
		s, _ := fs.Get("f")
		t0 := time.Now()
		require.NoError(t, core.Do(ctx, s, func(ctx context.Context, f *countingFailer) error { return f.st.SetAlarm(ctx, t0) }))
		time.Sleep(time.Second)
		synctest.Wait()
		require.EqualValues(t, 1, runs.Load())
		require.NoError(t, rt.Close())

		index := filepath.Join(dir, "_runtime.sqlite")
		duplicateLetter(t, index, true) // as an earlier version could leave it
		rt, _ = open()
		dls, err := rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1, "the copies fold into one letter")
		require.NoError(t, rt.Admin().Rearm(ctx, dls[0].Seq, t0.Add(time.Minute)))
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		require.EqualValues(t, 2, runs.Load(), "re-armed: runs once more (and succeeds)")
		require.NoError(t, rt.Close())

		restoreLetter(t, index) // Rearm's removal of the record lost
		rt, _ = open()
		defer rt.Close()
		dls, err = rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.NoError(t, rt.Admin().Rearm(ctx, dls[0].Seq, t0.Add(10*time.Minute)))
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		require.EqualValues(t, 2, runs.Load(), "a letter re-armed already is not armed again")
		dls, err = rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Empty(t, dls, "it is removed")
	})
}

// countingFailer's alarm fails on its first run only.
type countingFailer struct {
	st   *core.State
	runs *atomic.Int64
}

func (f *countingFailer) Alarm(context.Context, core.AlarmInfo) error {
	if f.runs.Add(1) == 1 {
		return errors.New("first run fails")
	}
	return nil
}

// savedLetter is the dead letter duplicateLetter copied, for restoreLetter.
var savedLetter []any

// duplicateLetter writes a second copy of the index's one dead letter, with the unique key dropped,
// as a file written before the key existed.
func duplicateLetter(t *testing.T, path string, dropKey bool) {
	t.Helper()
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	if dropKey {
		_, err = db.Exec("DROP INDEX dead_letters_key")
		require.NoError(t, err)
	}
	row := make([]any, 11)
	ptrs := make([]any, 11)
	for i := range row {
		ptrs[i] = &row[i]
	}
	require.NoError(t, db.QueryRow("SELECT ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped FROM dead_letters").Scan(ptrs...))
	savedLetter = row
	_, err = db.Exec("INSERT INTO dead_letters(ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row...)
	require.NoError(t, err)
}

// restoreLetter puts the saved letter back in the index.
func restoreLetter(t *testing.T, path string) {
	t.Helper()
	db, err := sqlOpen(path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("INSERT INTO dead_letters(ns, name, id, path, key, kind, payload, scheduled, attempts, last_error, dropped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", savedLetter...)
	require.NoError(t, err)
}
