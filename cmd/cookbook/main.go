// Command cookbook is the workshop. Its default subcommand, serve, starts
// an HTTP server that reproduces the original runtime's hands-on sessions (the
// original's curl lines work against it as they did against the original runtime), with
// routes for every pattern of the cookbook and a live page at /. The
// subcommand tour runs every experiment of the original hands-on sessions in-process on a fast
// clock and prints, for each, what the original runtime showed and what
// this one shows.
//
// Usage:
//
//	go run ./cmd/cookbook [serve] [-addr 127.0.0.1:8787] [-data DIR] [-fast]
//	go run ./cmd/cookbook serve -node NAME [-routes URLS | -nats URLS] [...]   (cluster mode; serve -h lists every flag)
//	go run ./cmd/cookbook cluster [-nodes 3] [-data DIR]   (three node processes on 127.0.0.1)
//	go run ./cmd/cookbook tour [-scale 20]
//
// cluster starts a cluster on this machine: each node a process of its own
// (this program's serve -node), on free ports of 127.0.0.1, in a directory
// it names. It prints each node's page, PID and data directory, forwards
// their logs prefixed with their names, says when all are ready, and
// restarts nothing: a node that exits (kill -KILL its PID) is reported with
// the command that starts it again. On SIGINT or SIGTERM it stops its
// nodes (SIGTERM, then SIGKILL after a grace) and waits for them. In
// cluster mode the pattern routes are served at any node, the object's
// owner running them (methods.go); the lab, the inventory race and a
// room's WebSocket upgrade answer 421 at the others, naming the owner.
//
// serve stops on SIGINT or SIGTERM: it stops accepting requests, lets those
// in flight finish, then shuts the runtime down (Runtime.Shutdown; 10 s of
// grace in all), which closes every WebSocket with 1001 (going away) and
// keeps every pending alarm for the next start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2) // the flag's error and the usage are printed
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "cookbook: ") { // most say so already
			msg = "cookbook: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

// run runs the subcommand named by args[0] (serve when there is none) until
// it ends or ctx is done.
func run(ctx context.Context, args []string) error {
	return runTo(ctx, args, os.Stdout, os.Stderr)
}

func runTo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || isHelp(args[0])) {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr, nil)
	case "tour":
		return tourCommand(ctx, args, stdout, stderr)
	case "cluster":
		return clusterCommand(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

const usage = `usage:
  cookbook [serve] [-addr 127.0.0.1:8787] [-data DIR] [-fast]   the workshop server (default)
  cookbook serve -node NAME [-routes URLS | -nats URLS] ...     the same as one node of a cluster (JetStream);
                                                                cookbook serve -h lists every flag
  cookbook cluster [-nodes 3] [-data DIR]                       a cluster on this machine: one serve -node process per node,
                                                                on free ports; Ctrl-C stops them all
  cookbook tour [-scale 20]                                     every experiment of the original hands-on sessions, in-process
  cookbook help                                                 this text
`

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// usageError is a bad flag or argument; its message and the usage are
// printed already.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseFlags parses a subcommand's flags. For -h it prints the usage and
// the subcommand's flags on stdout and returns flag.ErrHelp, which the
// caller answers with nil (exit status 0); for a bad flag it prints the
// error, the usage and the flags on stderr and returns a usageError.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, on the right stream
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, stdout)
		return err
	case err != nil:
		printUsage(fs, stderr)
		return usageError{err}
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "unexpected arguments %q\n", fs.Args())
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())}
	}
	return nil
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, usage)
	fmt.Fprintf(w, "\nflags of %s:\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// item is an inventory item with one row of stock: the original's coordinator
// (the original) as it is written there, run by the tour. Chapter 1 of
// cookbook.md quotes its reserve.
type item struct{ st *core.State }

func newItem(ctx context.Context, st *core.State) (*item, error) {
	_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS item(id INTEGER PRIMARY KEY, stock INTEGER NOT NULL)`)
	return &item{st: st}, err
}

func (it *item) stock(ctx context.Context) (int, error) {
	var n int
	err := it.st.Storage().QueryRow(ctx, "SELECT stock FROM item WHERE id = 1").Scan(&n)
	if errors.Is(err, core.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

func (it *item) setStock(ctx context.Context, n int) error {
	_, err := it.st.Storage().Exec(ctx, "INSERT INTO item VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET stock = excluded.stock", n)
	return err
}

// reserve reads the stock and writes it back. With wait 0 only storage
// runs between the two, so no other call can interleave; a wait opens the
// input gate between them (SEMANTICS C2).
func (it *item) reserve(ctx context.Context, qty int, wait time.Duration) (bool, error) {
	left, err := it.stock(ctx)
	if err != nil || left < qty {
		return false, err
	}
	if wait > 0 { // a non-storage wait: the input gate opens here
		if err := it.st.Sleep(ctx, wait); err != nil {
			return false, err
		}
	}
	return true, it.setStock(ctx, left-qty)
}
