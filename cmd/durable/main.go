// Command durable inspects and repairs a data directory that no server holds: it opens the
// directory itself (core.Open takes its lock), registers none of its namespaces (so no object code
// runs and no alarm fires), does one thing and closes it.
//
// Usage:
//
//	go run ./cmd/durable <command> [-dir DIR] [flags] [arguments]
//
// Without -dir a command works on the workshop's data directory (cmd/cookbook's default, in the
// user's cache), and says so on stderr. Flags come before the arguments; a namespace, when a
// command takes one, is its first argument.
//
// The commands:
//
//	ls           the namespaces' objects, or one namespace's, from the catalog
//	inspect      one object: its tables, alarm, timers, dead letters and WebSockets
//	sql          a read-only SQL query on one object's database
//	alarms       every pending alarm and schedule entry, with its retry state
//	deadletters  the alarms given up after their last retry
//	rearm        arm dead letters again and remove them
//	check        the integrity of every database and of the alarm index
//	backup       a consistent copy of the directory
//	help         this text, or a command's (durable help sql; durable sql -h)
//
// Exit status: 0 done; 1 check found problems; 2 a usage error; 3 the directory is held by another
// process (a server running on it: the message names its PID); 4 any other failure (a refused
// query, an object or a namespace that does not exist, a directory that does not exist).
//
// With -json a command prints what the workshop's HTTP inspector answers, in its spelling
// (namespace, lastError, seq ...), times in milliseconds since the epoch.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable/cmd/internal/inspectjson"
	"github.com/durable-go/durable/core"
)

// Exit statuses.
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
	exitLocked   = 3
	exitFailed   = 4
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its usage line, what it does, and its body, which gets the parsed
// flag set and the open runtime.
type command struct {
	name, args, summary string
	flags               func(fs *flag.FlagSet) func(ctx context.Context, env *env) error
}

// env is what a command's body works with.
type env struct {
	rt     *core.Runtime
	fs     *flag.FlagSet
	stdout io.Writer
	json   bool
}

// problemsError is check's verdict: problems were found and printed.
type problemsError struct{ n int }

func (e problemsError) Error() string { return fmt.Sprintf("%d problems found", e.n) }

// usageErr is a bad argument, printed with the command's usage.
type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

var commands []command

func init() {
	commands = []command{
		{"ls", "[-after NAME] [-limit N] [NAMESPACE]", "every namespace's objects, or one namespace's a page at a time, from the catalog", lsCommand},
		{"inspect", "NAMESPACE NAME", "one object: its tables, alarm, timers with their retry state, dead letters and WebSockets", inspectCommand},
		{"sql", "[-limit N] NAMESPACE NAME QUERY [ARG...]", "a read-only SQL query on one object's database (the runtime's _durable_* tables included)", sqlCommand},
		{"alarms", "[NAMESPACE]", "every pending alarm and schedule entry, with its retry state", alarmsCommand},
		{"deadletters", "", "the alarms given up after their last retry", deadLettersCommand},
		{"rearm", "[-at TIME | -in DURATION] SEQ...", "arm dead letters again (retries reset) and remove them", rearmCommand},
		{"check", "", "the integrity of every database and of the alarm index (exit status 1 if anything is wrong)", checkCommand},
		{"backup", "DEST", "a consistent copy of the directory into DEST (new or empty)", backupCommand},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	name, args := args[0], args[1:]
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		if len(args) == 0 {
			fmt.Fprint(stdout, usage())
			return exitOK
		}
		name, args = args[0], []string{"-h"}
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "durable: unknown command %q\n\n%s", name, usage())
		return exitUsage
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	dir := fs.String("dir", "", "the data directory (default: the workshop's, "+defaultDataDir()+")")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	body := cmd.flags(fs)
	fs.SetOutput(io.Discard)
	printHelp := func(w io.Writer) {
		fmt.Fprintf(w, "usage: durable %s [-dir DIR] [-json] %s\n\n%s.\n\nflags:\n", cmd.name, cmd.args, cmd.summary)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "durable %s: %v\n", cmd.name, err)
		printHelp(stderr)
		return exitUsage
	}
	defaulted := *dir == ""
	if defaulted {
		*dir = defaultDataDir()
		fmt.Fprintf(stderr, "durable: data directory %s (the workshop's; -dir DIR chooses another)\n", *dir)
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(stderr, "durable %s: %s is not a directory\n", cmd.name, *dir)
		if defaulted {
			fmt.Fprintln(stderr, "durable: the workshop (go run ./cmd/cookbook) creates it; or pass -dir DIR")
		}
		return exitFailed
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := core.Open(core.Options{Dir: *dir, Logger: logger})
	if err != nil {
		fmt.Fprintf(stderr, "durable %s: %v\n", cmd.name, err)
		if errors.Is(err, core.ErrLocked) {
			fmt.Fprintln(stderr, "durable: stop the server holding it, or run the command on a backup")
			return exitLocked
		}
		return exitFailed
	}
	err = body(ctx, &env{rt: rt, fs: fs, stdout: stdout, json: *asJSON})
	if cerr := rt.Close(); err == nil && cerr != nil {
		err = cerr
	}
	var pe problemsError
	var ue usageErr
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &pe):
		fmt.Fprintf(stderr, "durable %s: %v\n", cmd.name, err)
		return exitProblems
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "durable %s: %v\n", cmd.name, err)
		printHelp(stderr)
		return exitUsage
	}
	fmt.Fprintf(stderr, "durable %s: %v\n", cmd.name, err)
	return exitFailed
}

func usage() string {
	var b strings.Builder
	b.WriteString("durable inspects and repairs a data directory no server holds.\n\nusage: durable <command> [-dir DIR] [flags] [arguments]\n\n")
	b.WriteString("-dir defaults to the workshop's data directory, " + defaultDataDir() + ".\n\ncommands:\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "  help\tthis text; durable help <command> (or durable <command> -h) for a command's flags")
	w.Flush()
	b.WriteString("\nexit status: 0 done, 1 check found problems, 2 usage error, 3 directory held by another process, 4 other failure\n")
	return b.String()
}

// output prints v as JSON, or as a table of header and rows.
func (e *env) output(v any, header []string, rows [][]string) error {
	if e.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

func stamp(t time.Time) string {
	if t.IsZero() || t.UnixNano() == 0 {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// stampMillis is stamp for a time in milliseconds since the epoch (0: none).
func stampMillis(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return stamp(time.UnixMilli(ms))
}

// args returns the command's arguments if there are from lo to hi of them. A flag among them
// (durable ls lab -json) is a usage error that says flags come first.
func (e *env) args(lo, hi int) ([]string, error) {
	a := e.fs.Args()
	if len(a) >= lo && len(a) <= hi {
		return a, nil
	}
	for _, s := range a {
		name, _, _ := strings.Cut(strings.TrimLeft(s, "-"), "=")
		if strings.HasPrefix(s, "-") && e.fs.Lookup(name) != nil {
			return nil, usageErr{fmt.Sprintf("flag %s after the arguments: flags come first (durable %s %s ...)", s, e.fs.Name(), s)}
		}
	}
	if len(a) < lo {
		return nil, usageErr{fmt.Sprintf("%s needs %d arguments, got %d", e.fs.Name(), lo, len(a))}
	}
	return nil, usageErr{fmt.Sprintf("unexpected arguments %q", a[hi:])}
}

// defaultDataDir is the workshop's default data directory (cmd/cookbook's): in the user's cache,
// or ./cookbook-data.
func defaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "durable-cookbook")
	}
	return "cookbook-data"
}

func lsCommand(fs *flag.FlagSet) func(context.Context, *env) error {
	after := fs.String("after", "", "with a NAMESPACE: list names after this one (the last of the previous page)")
	limit := fs.Int("limit", 100, "with a NAMESPACE: at most this many objects")
	return func(ctx context.Context, e *env) error {
		a, err := e.args(0, 1)
		if err != nil {
			return err
		}
		var out []objectJSON
		add := func(ns string, page []core.ObjectInfo) {
			for _, o := range page {
				out = append(out, objectJSON{ns, o.Name, o.ID, millis(o.Created), millis(o.LastActive), o.Size})
			}
		}
		if len(a) == 1 {
			if err := e.namespace(a[0]); err != nil {
				return err
			}
			page, err := e.rt.Admin().Objects(ctx, a[0], core.ObjectListOptions{After: *after, Limit: *limit})
			if err != nil {
				return err
			}
			add(a[0], page)
		} else {
			nss, err := e.rt.Admin().Namespaces()
			if err != nil {
				return err
			}
			for _, n := range nss {
				if err := e.all(ctx, n, func(page []core.ObjectInfo) error { add(n, page); return nil }); err != nil {
					return err
				}
			}
		}
		rows := make([][]string, len(out))
		for i, o := range out {
			rows[i] = []string{o.Namespace, o.Name, o.ID, stampMillis(o.Created), stampMillis(o.LastActive), strconv.FormatInt(o.Size, 10)}
		}
		if out == nil {
			out = []objectJSON{}
		}
		return e.output(out, []string{"NAMESPACE", "NAME", "ID", "CREATED", "LAST ACTIVE", "SIZE"}, rows)
	}
}

// all calls fn with every page of the namespace's objects.
func (e *env) all(ctx context.Context, ns string, fn func([]core.ObjectInfo) error) error {
	for after := ""; ; {
		page, err := e.rt.Admin().Objects(ctx, ns, core.ObjectListOptions{After: after, Limit: 1000})
		if err != nil {
			return err
		}
		if err := fn(page); err != nil {
			return err
		}
		if len(page) < 1000 {
			return nil
		}
		after = page[len(page)-1].Name
	}
}

func inspectCommand(*flag.FlagSet) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		a, err := e.args(2, 2)
		if err != nil {
			return err
		}
		if err := e.namespace(a[0]); err != nil {
			return err
		}
		rep, err := e.rt.Admin().Inspect(ctx, a[0], a[1])
		if err != nil {
			return e.noObject(err, a[0])
		}
		out := reportJSON(rep)
		if e.json {
			return e.output(out, nil, nil)
		}
		alarm := "-"
		if out.Alarm != nil {
			alarm = stampMillis(*out.Alarm)
		}
		if err := e.output(nil, []string{"NAMESPACE", "NAME", "ID", "FILE", "SIZE", "CREATED", "RESIDENT", "ALARM"},
			[][]string{{out.Namespace, out.Name, out.ID, out.File, strconv.FormatInt(out.Size, 10), stampMillis(out.Created), strconv.FormatBool(out.Resident), alarm}}); err != nil {
			return err
		}
		rows := make([][]string, len(out.Tables))
		for i, t := range out.Tables {
			rows[i] = []string{t.Name, strconv.FormatInt(t.Rows, 10), strings.Join(t.Columns, ",")}
		}
		fmt.Fprintln(e.stdout)
		if err := e.output(nil, []string{"TABLE", "ROWS", "COLUMNS"}, rows); err != nil {
			return err
		}
		if len(out.Timers) > 0 {
			fmt.Fprintln(e.stdout)
			if err := e.output(nil, timerHeader[2:], timerRows(out.Timers, false)); err != nil {
				return err
			}
		}
		if len(out.DeadLetters) > 0 {
			fmt.Fprintln(e.stdout)
			if err := e.output(nil, deadLetterHeader, deadLetterRows(out.DeadLetters)); err != nil {
				return err
			}
		}
		if len(out.WebSockets) > 0 {
			fmt.Fprintf(e.stdout, "\n%d WebSockets open\n", len(out.WebSockets))
		}
		return nil
	}
}

// namespace checks that the catalog has objects in ns; if not, the error names the namespaces it
// has.
func (e *env) namespace(ns string) error {
	nss, err := e.rt.Admin().Namespaces()
	if err != nil {
		return err
	}
	if slices.Contains(nss, ns) {
		return nil
	}
	if len(nss) == 0 {
		return fmt.Errorf("no namespace %q: the directory has no objects", ns)
	}
	return fmt.Errorf("no namespace %q; the namespaces: %s", ns, strings.Join(nss, ", "))
}

// noObject adds to an ErrNoObject the command that lists the namespace's objects.
func (e *env) noObject(err error, ns string) error {
	if errors.Is(err, core.ErrNoObject) {
		return fmt.Errorf("%w (durable ls %s lists its objects)", err, ns)
	}
	return err
}

func sqlCommand(fs *flag.FlagSet) func(context.Context, *env) error {
	limit := fs.Int("limit", 100, fmt.Sprintf("at most this many rows (at most %d)", core.MaxQueryRows))
	return func(ctx context.Context, e *env) error {
		a := e.fs.Args()
		if len(a) < 3 {
			return usageErr{"sql needs a namespace, an object's name and a query"}
		}
		if err := e.namespace(a[0]); err != nil {
			return err
		}
		args := make([]any, len(a)-3)
		for i, s := range a[3:] {
			args[i] = s
		}
		res, err := e.rt.Admin().Query(ctx, a[0], a[1], *limit, a[2], args...)
		if err != nil {
			return e.noObject(err, a[0])
		}
		if e.json {
			return e.output(inspectjson.Query(res), nil, nil)
		}
		rows := make([][]string, len(res.Rows))
		for i, r := range res.Rows {
			rows[i] = make([]string, len(r))
			for j, v := range r {
				rows[i][j] = cell(v)
			}
		}
		if err := e.output(nil, res.Columns, rows); err != nil {
			return err
		}
		if res.Truncated {
			fmt.Fprintf(e.stdout, "(first %d rows; -limit shows more)\n", len(res.Rows))
		}
		return nil
	}
}

// cell prints an SQLite value: NULL, a number, text, or a blob (as text if it is UTF-8, else hex).
func cell(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		if utf8.Valid(v) {
			return string(v)
		}
		return fmt.Sprintf("x'%x'", v)
	case string:
		return strings.ReplaceAll(strings.ReplaceAll(v, "\n", `\n`), "\t", `\t`)
	}
	return fmt.Sprint(v)
}

func alarmsCommand(*flag.FlagSet) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		a, err := e.args(0, 1)
		if err != nil {
			return err
		}
		nss := a
		if len(a) == 1 {
			if err := e.namespace(a[0]); err != nil {
				return err
			}
		} else if nss, err = e.rt.Admin().Namespaces(); err != nil {
			return err
		}
		out := []timerJSON{}
		for _, n := range nss {
			err := e.all(ctx, n, func(page []core.ObjectInfo) error {
				for _, o := range page {
					rep, err := e.rt.Admin().Inspect(ctx, n, o.Name)
					if err != nil {
						return err
					}
					for _, t := range rep.Timers {
						out = append(out, timerOf(n, o.Name, t))
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return e.output(out, timerHeader, timerRows(out, true))
	}
}

var timerHeader = []string{"NAMESPACE", "NAME", "PATH", "KEY", "KIND", "AT", "RETRIES", "RUNNING", "CRON"}

// timerRows are the timers as a table's rows, with their objects' namespace and name or without.
func timerRows(ts []timerJSON, object bool) [][]string {
	rows := make([][]string, len(ts))
	for i, t := range ts {
		key := t.Key
		if key == "" {
			key = "(alarm)"
		}
		rows[i] = []string{t.Path, key, t.Kind, stampMillis(t.At), strconv.Itoa(t.Retries), strconv.FormatBool(t.Running), t.Cron}
		if object {
			rows[i] = append([]string{t.Namespace, t.Name}, rows[i]...)
		}
	}
	return rows
}

func deadLettersCommand(*flag.FlagSet) func(context.Context, *env) error {
	return func(_ context.Context, e *env) error {
		if _, err := e.args(0, 0); err != nil {
			return err
		}
		dls, err := e.rt.Admin().DeadLetters()
		if err != nil {
			return err
		}
		out := make([]deadLetterJSON, len(dls))
		for i, d := range dls {
			out[i] = deadLetterOf(d)
		}
		return e.output(out, deadLetterHeader, deadLetterRows(out))
	}
}

var deadLetterHeader = []string{"SEQ", "NAMESPACE", "NAME", "PATH", "KEY", "SCHEDULED", "ATTEMPTS", "DROPPED", "LAST ERROR"}

func deadLetterRows(dls []deadLetterJSON) [][]string {
	rows := make([][]string, len(dls))
	for i, d := range dls {
		key := d.Key
		if key == "" {
			key = "(alarm)"
		}
		rows[i] = []string{strconv.FormatInt(d.Seq, 10), d.Namespace, d.Name, d.Path, key, stampMillis(d.Scheduled), strconv.Itoa(d.Attempts), stampMillis(d.Dropped), cell(d.LastError)}
	}
	return rows
}

func rearmCommand(fs *flag.FlagSet) func(context.Context, *env) error {
	at := fs.String("at", "", "when the re-armed alarms run (RFC 3339; default now)")
	in := fs.Duration("in", 0, "run the re-armed alarms this long from now (instead of -at)")
	return func(ctx context.Context, e *env) error {
		if e.fs.NArg() == 0 {
			return usageErr{"rearm needs the sequence numbers of dead letters (durable deadletters lists them)"}
		}
		when := time.Now().Add(*in)
		if *at != "" {
			if *in != 0 {
				return usageErr{"give -at or -in, not both"}
			}
			t, err := time.Parse(time.RFC3339Nano, *at)
			if err != nil {
				return usageErr{fmt.Sprintf("-at: %v", err)}
			}
			when = t
		}
		var seqs []int64
		for _, a := range e.fs.Args() {
			seq, err := strconv.ParseInt(a, 10, 64)
			if err != nil {
				return usageErr{fmt.Sprintf("%q is not a dead letter's sequence number", a)}
			}
			seqs = append(seqs, seq)
		}
		for _, seq := range seqs {
			if err := e.rt.Admin().Rearm(ctx, seq, when); err != nil {
				return err
			}
			if !e.json {
				fmt.Fprintf(e.stdout, "re-armed %d for %s\n", seq, stamp(when))
			}
		}
		if e.json {
			return e.output(map[string]any{"rearmed": seqs, "at": millis(when)}, nil, nil)
		}
		return nil
	}
}

func checkCommand(*flag.FlagSet) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if _, err := e.args(0, 0); err != nil {
			return err
		}
		problems, err := e.rt.Admin().Check(ctx)
		if err != nil {
			return err
		}
		if len(problems) == 0 && !e.json {
			fmt.Fprintln(e.stdout, "ok: every database and the alarm index are sound")
			return nil
		}
		rows := make([][]string, len(problems))
		out := make([]problemJSON, len(problems))
		for i, p := range problems {
			rows[i] = []string{p.Namespace, p.Name, p.File, p.Problem}
			out[i] = problemJSON(p)
		}
		if err := e.output(out, []string{"NAMESPACE", "NAME", "FILE", "PROBLEM"}, rows); err != nil {
			return err
		}
		if len(problems) > 0 {
			return problemsError{len(problems)}
		}
		return nil
	}
}

func backupCommand(*flag.FlagSet) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if e.fs.NArg() != 1 {
			return usageErr{"backup needs one destination directory"}
		}
		dst, err := filepath.Abs(e.fs.Arg(0))
		if err != nil {
			return err
		}
		p, err := e.rt.Admin().Backup(ctx, dst, core.BackupOptions{})
		if err != nil {
			return err
		}
		if e.json {
			return e.output(map[string]any{"dest": dst, "objects": p.Objects, "skipped": p.Skipped, "bytes": p.Bytes}, nil, nil)
		}
		fmt.Fprintf(e.stdout, "backed up %d objects (%d bytes, %d skipped) to %s\n", p.Objects, p.Bytes, p.Skipped, dst)
		return nil
	}
}
