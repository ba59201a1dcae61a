package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

var binary string

// TestMain builds the command once; the tests run it as a real process.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "durable-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(tmp, "durable")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

type note struct{ st *core.State }

func newNote(ctx context.Context, st *core.State) (*note, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS lines(n INTEGER PRIMARY KEY, text TEXT NOT NULL)")
	return &note{st}, err
}

func (n *note) Alarm(context.Context, core.AlarmInfo) error { return nil }

type failer struct{ st *core.State }

func (f *failer) Alarm(context.Context, core.AlarmInfo) error { return errors.New("always fails") }

// seed writes a directory as a server would: notes n0, n1, n2 (each a line and a KV value; n0 an
// alarm at alarmAt) and failers/f, whose alarm is in the dead-letter table.
var alarmAt = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)

func seed(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dropped := make(chan struct{}, 1)
	rt, err := core.Open(core.Options{Dir: dir, AlarmRetry: core.RetryPolicy{MaxRetries: -1},
		OnAlarmDropped: func(core.DeadLetter) { dropped <- struct{}{} }})
	require.NoError(t, err)
	ns, err := core.Register(rt, "notes", newNote)
	require.NoError(t, err)
	for i := range 3 {
		s, _ := ns.Get(fmt.Sprintf("n%d", i))
		require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error {
			if _, err := n.st.Storage().Exec(ctx, "INSERT INTO lines(text) VALUES (?)", fmt.Sprintf("line %d", i)); err != nil {
				return err
			}
			if i == 0 {
				if err := n.st.SetAlarm(ctx, alarmAt); err != nil {
					return err
				}
			}
			return n.st.Storage().Put(ctx, "k", []byte("v"))
		}))
	}
	fns, err := core.Register(rt, "failers", func(_ context.Context, st *core.State) (*failer, error) { return &failer{st}, nil })
	require.NoError(t, err)
	fs, _ := fns.Get("f")
	require.NoError(t, core.Do(ctx, fs, func(ctx context.Context, f *failer) error { return f.st.SetAlarm(ctx, time.Now()) }))
	<-dropped
	require.NoError(t, rt.Close())
	return dir
}

// durable runs the command and returns its stdout, stderr and exit status. The user's cache, where
// the workshop's default data directory is, is an empty directory of the test's.
func durable(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return durableCache(t, t.TempDir(), args...)
}

// durableCache is durable with the user's cache at cache.
func durableCache(t *testing.T, cache string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, "HOME="+cache)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// fields splits a table's lines into their columns.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// S-O9: ls lists the catalog: every namespace's objects, or one namespace's a
// page at a time (the namespace is the argument), as a table or as JSON.
func TestLs(t *testing.T) {
	dir := seed(t)
	out, errOut, code := durable(t, "ls", "-dir", dir)
	require.Equal(t, 0, code, errOut)
	rows := fields(out)
	require.Equal(t, []string{"NAMESPACE", "NAME", "ID", "CREATED", "LAST", "ACTIVE", "SIZE"}, rows[0])
	var got []string
	for _, r := range rows[1:] {
		got = append(got, r[0]+"/"+r[1])
		size, err := strconv.ParseInt(r[len(r)-1], 10, 64)
		require.NoError(t, err)
		require.Positive(t, size, r)
	}
	require.Equal(t, []string{"failers/f", "notes/n0", "notes/n1", "notes/n2"}, got)

	out, errOut, code = durable(t, "ls", "-dir", dir, "-json", "-after", "n0", "-limit", "1", "notes")
	require.Equal(t, 0, code, errOut)
	var objs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &objs))
	require.Len(t, objs, 1)
	require.Equal(t, "notes", objs[0]["namespace"])
	require.Equal(t, "n1", objs[0]["name"])
	require.NotEmpty(t, objs[0]["id"])

	out, errOut, code = durable(t, "ls", "-dir", dir, "notes")
	require.Equal(t, 0, code, errOut)
	require.Len(t, fields(out), 4, out)
}

// Without -dir a command works on the workshop's data directory, in the
// user's cache, and says which; when there is none it says how to get one.
func TestDefaultDir(t *testing.T) {
	cache := t.TempDir()
	_, errOut, code := durableCache(t, cache, "ls")
	require.Equal(t, 4, code, errOut)
	want := filepath.Join(cache, "durable-cookbook")
	require.Contains(t, errOut, want+" is not a directory")
	require.Contains(t, errOut, "go run ./cmd/cookbook")

	require.NoError(t, os.Rename(seed(t), want))
	out, errOut, code := durableCache(t, cache, "ls", "notes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "data directory "+want)
	require.Len(t, fields(out), 4, out)
}

// The namespace is an argument in every command that takes one; a flag
// after the arguments is a usage error that says flags come first.
func TestArguments(t *testing.T) {
	dir := seed(t)
	for _, args := range [][]string{{"ls", "-dir", dir, "notes", "-json"}, {"alarms", "-dir", dir, "notes", "-json"}, {"inspect", "-dir", dir, "notes", "n0", "-json"}} {
		_, errOut, code := durable(t, args...)
		require.Equal(t, 2, code, args)
		require.Contains(t, errOut, "flag -json after the arguments: flags come first", args)
	}
	_, errOut, code := durable(t, "ls", "-dir", dir, "notes", "failers")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unexpected arguments ["failers"]`)
}

// An unknown namespace is named with the namespaces there are; an unknown
// object with the command that lists its namespace's objects.
func TestUnknownNamespace(t *testing.T) {
	dir := seed(t)
	for _, args := range [][]string{{"ls", "lab"}, {"alarms", "lab"}, {"inspect", "lab", "n0"}, {"sql", "lab", "n0", "SELECT 1"}} {
		_, errOut, code := durable(t, append([]string{args[0], "-dir", dir}, args[1:]...)...)
		require.Equal(t, 4, code, args)
		require.Contains(t, errOut, `no namespace "lab"; the namespaces: failers, notes`, args)
	}
	for _, args := range [][]string{{"inspect", "notes", "nobody"}, {"sql", "notes", "nobody", "SELECT 1"}} {
		_, errOut, code := durable(t, append([]string{args[0], "-dir", dir}, args[1:]...)...)
		require.Equal(t, 4, code, args)
		require.Contains(t, errOut, "no such object (durable ls notes lists its objects)", args)
	}
}

// inspect reports one object as /inspect/object does: its tables, alarm
// and timers, as a table or as JSON.
func TestInspect(t *testing.T) {
	dir := seed(t)
	out, errOut, code := durable(t, "inspect", "-dir", dir, "notes", "n0")
	require.Equal(t, 0, code, errOut)
	rows := fields(out)
	require.Equal(t, []string{"NAMESPACE", "NAME", "ID", "FILE", "SIZE", "CREATED", "RESIDENT", "ALARM"}, rows[0])
	require.Equal(t, []string{"notes", "n0"}, rows[1][:2])
	require.Equal(t, alarmAt.Format(time.RFC3339Nano), rows[1][7])
	require.Contains(t, out, "lines")
	require.Contains(t, out, "(alarm)")

	out, errOut, code = durable(t, "inspect", "-dir", dir, "-json", "notes", "n0")
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Namespace string `json:"namespace"`
		Size      int64  `json:"size"`
		Alarm     int64  `json:"alarm"`
		Tables    []struct {
			Name string `json:"name"`
			Rows int64  `json:"rows"`
		} `json:"tables"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "notes", rep.Namespace)
	require.Positive(t, rep.Size)
	require.Equal(t, alarmAt.UnixMilli(), rep.Alarm)
	require.Contains(t, rep.Tables, struct {
		Name string `json:"name"`
		Rows int64  `json:"rows"`
	}{"lines", 1})
}

// -json speaks as the workshop's HTTP inspector does: the same keys
// (/inspect/objects, /inspect/object, /inspect/sql, /deadletters), times in
// ms since the epoch.
func TestJSON_SpellsAsHTTP(t *testing.T) {
	dir := seed(t)
	keys := func(args ...string) []string {
		t.Helper()
		out, errOut, code := durable(t, append([]string{args[0], "-dir", dir, "-json"}, args[1:]...)...)
		require.Equal(t, 0, code, errOut)
		var v any
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		if a, ok := v.([]any); ok {
			require.NotEmpty(t, a, args)
			v = a[0]
		}
		return slices.Sorted(maps.Keys(v.(map[string]any)))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "created id lastActive name namespace size"},
		{[]string{"alarms"}, "at cron key kind name namespace path retries running scheduled"},
		{[]string{"deadletters"}, "attempts dropped lastError name namespace scheduled seq"},
		{[]string{"inspect", "notes", "n0"}, "alarm created deadLetters file id name namespace resident size tables timers webSockets"},
		{[]string{"sql", "notes", "n0", "SELECT 1"}, "columns rows truncated"},
	} {
		require.Equal(t, c.want, strings.Join(keys(c.args...), " "), c.args)
	}
}

// S-O8, S-O9: sql runs a read-only query, with arguments, the runtime's
// tables readable; a write is refused (status 4) and changes nothing.
func TestSQL(t *testing.T) {
	dir := seed(t)
	out, errOut, code := durable(t, "sql", "-dir", dir, "notes", "n1", "SELECT n, text FROM lines WHERE text = ?", "line 1")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, [][]string{{"n", "text"}, {"1", "line", "1"}}, fields(out))

	out, errOut, code = durable(t, "sql", "-dir", dir, "-json", "notes", "n1", "SELECT key, value FROM _durable_kv")
	require.Equal(t, 0, code, errOut)
	var res struct {
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, []string{"key", "value"}, res.Columns)
	require.Equal(t, [][]any{{"k", "v"}}, res.Rows)

	for _, q := range []string{"DELETE FROM lines", "DROP TABLE lines", "UPDATE _durable_kv SET value = x'00'", "PRAGMA user_version = 3"} {
		_, errOut, code = durable(t, "sql", "-dir", dir, "notes", "n1", q)
		require.Equal(t, 4, code, q)
		require.Contains(t, errOut, "read-only", q)
	}
	out, _, code = durable(t, "sql", "-dir", dir, "notes", "n1", "SELECT count(*) FROM lines")
	require.Equal(t, 0, code)
	require.Equal(t, [][]string{{"count(*)"}, {"1"}}, fields(out))
	out, _, _ = durable(t, "sql", "-dir", dir, "notes", "n1", "SELECT user_version FROM pragma_user_version")
	require.Equal(t, [][]string{{"user_version"}, {"1"}}, fields(out), "the runtime's mark (its tables are set up), not the refused 3")

	_, errOut, code = durable(t, "sql", "-dir", dir, "notes", "nobody", "SELECT 1")
	require.Equal(t, 4, code)
	require.Contains(t, errOut, "no such object")
}

// S-O9, S-O6: alarms lists the pending alarms with their retry state;
// deadletters lists the dropped one; rearm arms it again (no object code
// runs) and removes it; the next start of a server would run it.
func TestAlarmsDeadLettersRearm(t *testing.T) {
	dir := seed(t)
	out, errOut, code := durable(t, "alarms", "-dir", dir)
	require.Equal(t, 0, code, errOut)
	rows := fields(out)
	require.Equal(t, []string{"NAMESPACE", "NAME", "PATH", "KEY", "KIND", "AT", "RETRIES", "RUNNING", "CRON"}, rows[0])
	require.Len(t, rows, 2, out)
	require.Equal(t, []string{"notes", "n0", "(alarm)", alarmAt.Format(time.RFC3339Nano), "0", "false"}, rows[1])

	out, errOut, code = durable(t, "deadletters", "-dir", dir, "-json")
	require.Equal(t, 0, code, errOut)
	var dls []struct {
		Seq       int64  `json:"seq"`
		Namespace string `json:"namespace"`
		LastError string `json:"lastError"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dls))
	require.Len(t, dls, 1)
	require.Equal(t, "failers", dls[0].Namespace)
	require.Equal(t, "always fails", dls[0].LastError)
	out, _, _ = durable(t, "deadletters", "-dir", dir)
	require.Contains(t, out, "always fails")

	_, errOut, code = durable(t, "rearm", "-dir", dir, "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "sequence number")
	at := alarmAt.Add(time.Hour)
	seq := strconv.FormatInt(dls[0].Seq, 10)
	out, errOut, code = durable(t, "rearm", "-dir", dir, "-at", at.Format(time.RFC3339), seq)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "re-armed "+seq)
	out, _, _ = durable(t, "deadletters", "-dir", dir, "-json")
	require.JSONEq(t, "[]", out)
	out, _, _ = durable(t, "alarms", "-dir", dir, "failers")
	require.Equal(t, []string{"failers", "f", "(alarm)", at.Format(time.RFC3339Nano), "0", "false"}, fields(out)[1])
	_, errOut, code = durable(t, "rearm", "-dir", dir, seq)
	require.Equal(t, 4, code)
	require.Contains(t, errOut, "no dead letter")
}

// S-O9: check says a sound directory is sound (status 0) and names a damaged
// database (status 1).
func TestCheck(t *testing.T) {
	dir := seed(t)
	out, errOut, code := durable(t, "check", "-dir", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ok")

	out, _, _ = durable(t, "ls", "-dir", dir, "-json", "notes")
	var objs []struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &objs))
	file := filepath.Join(dir, "notes", objs[2].ID+".sqlite")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(file + suffix)
	}
	out, errOut, code = durable(t, "check", "-dir", dir)
	require.Equal(t, 1, code, errOut)
	rows := fields(out)
	require.Len(t, rows, 2, out)
	require.Equal(t, []string{"notes", "n2"}, rows[1][:2])
	require.Contains(t, out, "missing")
	require.Contains(t, errOut, "1 problems found")
}

// S-O7, S-O9: backup writes a copy that the command (and a server) opens.
func TestBackup(t *testing.T) {
	dir := seed(t)
	dst := filepath.Join(t.TempDir(), "copy")
	out, errOut, code := durable(t, "backup", "-dir", dir, dst)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "backed up 4 objects")
	orig, _, _ := durable(t, "ls", "-dir", dir, "-json")
	copied, errOut, code := durable(t, "ls", "-dir", dst, "-json")
	require.Equal(t, 0, code, errOut)
	names := func(s string) []string {
		var objs []struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		}
		require.NoError(t, json.Unmarshal([]byte(s), &objs))
		var out []string
		for _, o := range objs {
			out = append(out, o.Namespace+"/"+o.Name)
		}
		return out
	}
	require.Equal(t, names(orig), names(copied))
	out, _, _ = durable(t, "sql", "-dir", dst, "notes", "n2", "SELECT text FROM lines")
	require.Equal(t, [][]string{{"text"}, {"line", "2"}}, fields(out))
}

// S-O1, S-O9: on a directory a server holds, every command refuses at once
// with status 3, naming the holder's PID, and changes nothing.
func TestLocked(t *testing.T) {
	dir := seed(t)
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	defer rt.Close()
	for _, args := range [][]string{{"ls"}, {"check"}, {"rearm", "1"}, {"backup", filepath.Join(t.TempDir(), "b")}} {
		_, errOut, code := durable(t, append([]string{args[0], "-dir", dir}, args[1:]...)...)
		require.Equal(t, 3, code, args)
		require.Contains(t, errOut, "process "+strconv.Itoa(os.Getpid()), args)
	}
	nss, err := rt.Admin().Namespaces()
	require.NoError(t, err)
	require.Equal(t, []string{"failers", "notes"}, nss)
}

// S-O9: usage errors are status 2 with the usage on stderr; help and -h are
// status 0 with the usage on stdout.
func TestUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, 2, "", "usage: durable <command>"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "exit status: 0 done, 1 check found problems", ""},
		{[]string{"help", "sql"}, 0, "usage: durable sql [-dir DIR]", ""},
		{[]string{"check", "-h"}, 0, "usage: durable check [-dir DIR]", ""},
		{[]string{"help", "inspect"}, 0, "usage: durable inspect [-dir DIR] [-json] NAMESPACE NAME", ""},
		{[]string{"inspect", "-dir", dir, "notes"}, 2, "", "inspect needs 2 arguments, got 1"},
		{[]string{"ls", "-dir", dir, "-bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"sql", "-dir", dir, "notes"}, 2, "", "sql needs a namespace"},
		{[]string{"ls", "-dir", filepath.Join(dir, "nope")}, 4, "", "is not a directory"},
	} {
		out, errOut, code := durable(t, c.args...)
		require.Equal(t, c.code, code, "%q: %s", c.args, errOut)
		if c.stdout != "" {
			require.Contains(t, out, c.stdout, c.args)
		}
		if c.stderr != "" {
			require.Contains(t, errOut, c.stderr, c.args)
		}
	}
	_, err := os.Stat(filepath.Join(dir, "nope"))
	require.True(t, errors.Is(err, os.ErrNotExist))
}
