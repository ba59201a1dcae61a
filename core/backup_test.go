package core_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-O7: a backup of a running directory opens as a normal directory: the
// objects' values, tables and pending alarms (which fire there) and the dead
// letters are in the copy; the progress reaches every object; a backup is
// refused into a non-empty directory or into the data directory.
func TestBackup_CopyOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
		rt, err := core.Open(core.Options{Dir: dir, AlarmRetry: core.RetryPolicy{MaxRetries: -1}})
		require.NoError(t, err)
		ns, err := core.Register(rt, "notes", newNote)
		require.NoError(t, err)
		fns, err := core.Register(rt, "failers", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
		require.NoError(t, err)
		t0 := time.Now()
		for i := range 10 {
			name := fmt.Sprintf("n%d", i)
			require.NoError(t, putNote(ctx, ns, name, "k", "value "+name))
			s, _ := ns.Get(name)
			require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error {
				_, err := n.st.Storage().Exec(ctx, "INSERT INTO lines(text) VALUES (?)", name)
				if err == nil && i < 3 {
					err = n.st.SetAlarm(ctx, t0.Add(time.Hour))
				}
				return err
			}))
		}
		fs, _ := fns.Get("f")
		require.NoError(t, core.Do(ctx, fs, func(ctx context.Context, f *failer) error { return f.st.SetAlarm(ctx, t0) }))
		time.Sleep(time.Second)
		synctest.Wait()

		var seen []core.BackupProgress
		p, err := rt.Admin().Backup(ctx, dst, core.BackupOptions{Progress: func(p core.BackupProgress) { seen = append(seen, p) }})
		require.NoError(t, err)
		require.Equal(t, 11, p.Total)
		require.Equal(t, 11, p.Objects)
		require.Zero(t, p.Skipped)
		require.Positive(t, p.Bytes)
		require.Len(t, seen, 11, "progress after each object")
		for i, s := range seen {
			require.Equal(t, i+1, s.Objects)
		}
		require.FileExists(t, filepath.Join(dst, "_backup.json"))
		require.NoFileExists(t, filepath.Join(dst, "_backup_incomplete"))

		_, err = rt.Admin().Backup(ctx, dst, core.BackupOptions{})
		require.ErrorContains(t, err, "not empty")
		_, err = rt.Admin().Backup(ctx, filepath.Join(dir, "inside"), core.BackupOptions{})
		require.ErrorContains(t, err, "outside the data directory")
		require.NoError(t, rt.Close())

		cp, err := core.Open(core.Options{Dir: dst})
		require.NoError(t, err, "the copy opens as a data directory")
		defer cp.Close()
		cns, err := core.Register(cp, "notes", newNote)
		require.NoError(t, err)
		_, err = core.Register(cp, "failers", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
		require.NoError(t, err)
		page, err := cns.List(ctx, core.ObjectListOptions{})
		require.NoError(t, err)
		require.Len(t, page, 10)
		for i := range 10 {
			name := fmt.Sprintf("n%d", i)
			v, ok, err := getNote(ctx, cns, name, "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "value "+name, v)
		}
		dls, err := cp.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1, "the dead letters are in the copy")
		require.EqualValues(t, 3, cp.Stats().Alarms)
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		for i := range 3 {
			_, ok, err := getNote(ctx, cns, fmt.Sprintf("n%d", i), "fired")
			require.NoError(t, err)
			require.True(t, ok, "the copy's alarm %d fires", i)
		}
	})
}

// S-O7: under a write load, every write acknowledged before the backup began
// is in the copy, and the writes go on during the backup.
func TestBackup_UnderWriteLoad(t *testing.T) {
	ctx := context.Background()
	dir, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	rt, ns := openNoteDir(t, dir)
	const objects, writers = 20, 8
	var acked [objects]atomic.Int64
	for i := range objects {
		require.NoError(t, putNote(ctx, ns, fmt.Sprintf("o%02d", i), "seq", "0"))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (w + n*writers) % objects
				s, _ := ns.Get(fmt.Sprintf("o%02d", i))
				var seq int64
				err := core.Do(ctx, s, func(ctx context.Context, o *note) error {
					v, _, err := o.st.Storage().Get(ctx, "seq")
					if err != nil {
						return err
					}
					seq, _ = strconv.ParseInt(string(v), 10, 64)
					seq++
					return o.st.Storage().Put(ctx, "seq", []byte(strconv.FormatInt(seq, 10)))
				})
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
				for { // acked[i] = max(acked[i], seq)
					cur := acked[i].Load()
					if seq <= cur || acked[i].CompareAndSwap(cur, seq) {
						break
					}
				}
			}
		}()
	}
	for calls.Load() < 200 { // the load is under way
		time.Sleep(time.Millisecond)
	}
	var before [objects]int64
	for i := range objects {
		before[i] = acked[i].Load()
	}
	callsBefore := calls.Load()
	_, err := rt.Admin().Backup(ctx, dst, core.BackupOptions{})
	callsDuring := calls.Load() - callsBefore
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Positive(t, callsDuring, "the writes went on during the backup")
	require.NoError(t, rt.Close())

	_, cns := openNoteDir(t, dst)
	for i := range objects {
		v, ok, err := getNote(ctx, cns, fmt.Sprintf("o%02d", i), "seq")
		require.NoError(t, err)
		require.True(t, ok)
		got, _ := strconv.ParseInt(v, 10, 64)
		require.GreaterOrEqual(t, got, before[i], "object %d: every write acknowledged before the backup is in the copy", i)
	}
}

// S-O7: a backup killed (SIGKILL) while it writes leaves a directory that
// Open refuses with ErrIncompleteBackup, never a silently partial copy; one
// that finished opens with every object. The child process runs the backup
// and prints its progress; the parent kills it after k objects.
func TestBackup_SIGKILL(t *testing.T) {
	const objects = 120
	if os.Getenv("DURABLE_BACKUP_CHILD") != "" {
		rt, err := core.Open(core.Options{Dir: os.Getenv("DURABLE_BACKUP_CHILD")})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		core.Register(rt, "notes", newNote)
		_, err = rt.Admin().Backup(context.Background(), os.Getenv("DURABLE_BACKUP_DST"), core.BackupOptions{Progress: func(p core.BackupProgress) {
			fmt.Printf("progress %d\n", p.Objects)
		}})
		fmt.Println("done", err)
		time.Sleep(time.Minute) // until killed
		return
	}
	ctx := context.Background()
	src := t.TempDir()
	rt, ns := openNoteDir(t, src)
	for i := range objects {
		require.NoError(t, putNote(ctx, ns, fmt.Sprintf("o%03d", i), "k", strings.Repeat("x", 4096)))
	}
	require.NoError(t, rt.Close())
	for _, killAt := range []int{1, objects / 2, -1} { // -1: after it is done
		t.Run(fmt.Sprint("kill after ", killAt), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "copy")
			cmd := exec.Command(os.Args[0], "-test.run=^TestBackup_SIGKILL$", "-test.count=1")
			cmd.Env = append(os.Environ(), "DURABLE_BACKUP_CHILD="+src, "DURABLE_BACKUP_DST="+dst)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(out)
			done := false
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "done") {
					require.Equal(t, "done <nil>", line)
					done = true
					break
				}
				if n, err := strconv.Atoi(strings.TrimPrefix(line, "progress ")); err == nil && n == killAt {
					break
				}
			}
			require.NoError(t, cmd.Process.Kill())
			cmd.Wait()
			_, err = os.Stat(filepath.Join(dst, "_backup.json"))
			complete := err == nil
			require.Equal(t, done, complete, "a complete backup has its manifest, an interrupted one none")
			crt, err := core.Open(core.Options{Dir: dst})
			if !complete {
				require.ErrorIs(t, err, core.ErrIncompleteBackup, "an interrupted backup is clearly incomplete")
				require.Contains(t, err.Error(), dst)
				return
			}
			require.NoError(t, err)
			defer crt.Close()
			cns, err := core.Register(crt, "notes", newNote)
			require.NoError(t, err)
			page, err := cns.List(ctx, core.ObjectListOptions{Limit: 1000})
			require.NoError(t, err)
			require.Len(t, page, objects)
			v, ok, err := getNote(ctx, cns, "o077", "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.Len(t, v, 4096)
		})
	}
}
