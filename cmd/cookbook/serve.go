package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durable-go/durable/core"
)

// fastRetry is the -fast retry ladder: 100 ms, 200 ms, ... 3.2 s, so that
// a failing alarm reaches the dead-letter table in about 6 s instead of
// about 2 min.
var fastRetry = core.RetryPolicy{FirstDelay: 100 * time.Millisecond}

// shutdownGrace is how long serve waits, in all, for requests in flight
// and then the runtime's running turns to finish.
const shutdownGrace = 10 * time.Second

// serve runs the workshop server until ctx is done. ready, if not nil, is
// called with the address once the server listens.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("cookbook serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8787", "address to listen on")
	data := fs.String("data", defaultDataDir(), "data directory: the objects' databases, alarms and dead letters")
	fast := fs.Bool("fast", envBool("COOKBOOK_FAST"), "retry failed alarms after 100 ms, 200 ms, ... 3.2 s instead of 2 s ... 64 s (also COOKBOOK_FAST=1)")
	banner := fs.Bool("banner", true, "print the page's address and the curl lines to try")
	var cf clusterFlags
	cf.register(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	chosen := false
	fs.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "data" })
	log := slog.New(slog.NewTextHandler(stderr, nil))
	metrics, err := newMetricsEndpoint()
	if err != nil {
		return err
	}
	defer metrics.Close()
	// Listen first: in cluster mode the node advertises the address.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	defer ln.Close() // a no-op once the server has served: Shutdown closed it
	cf.listening = ln.Addr().String()
	opts := core.Options{Dir: *data, Logger: log, Meter: metrics.provider}
	if *fast {
		opts.AlarmRetry = fastRetry
	}
	repl, stopCluster, err := cf.start(ctx, *data, log, stderr)
	if err != nil {
		return err
	}
	if repl != nil {
		opts.Replication = repl
		defer stopCluster() // after the runtime's Shutdown, which hands the leases back
	}
	rt, err := openData(opts, chosen, stdout)
	if err != nil {
		return err
	}
	a, err := newApp(rt, appConfig{StorePath: filepath.Join(rt.Dir(), "analytics.sqlite"), Logger: log, Metrics: metrics.handler})
	if err != nil {
		return errors.Join(err, rt.Close())
	}
	srv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if *banner {
		printBanner(stdout, ln.Addr().String(), rt.Dir(), rt.Stats().MaxOpenObjects, *fast)
	}
	if repl != nil {
		fmt.Fprintf(stdout, "cluster mode: node %s, serving at %s; a call for an object another node owns gets 421, naming it and its address\n", repl.Node, repl.Advertise)
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served: // the listener failed
	}
	fmt.Fprintln(stdout, "cookbook: shutting down: finishing requests, then closing WebSockets (1001) and keeping alarms")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	// Shutdown waits for requests in flight, not for hijacked connections:
	// the WebSockets belong to the runtime, whose Shutdown ends them with
	// 1001 once its running turns are done (or the grace is over).
	shutErr := srv.Shutdown(sctx)
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return cf.explain(errors.Join(serveErr, shutErr, rt.Shutdown(sctx), a.Close()))
}

// openData opens the runtime over opts.Dir. A directory held by another
// runtime (another workshop server, say) is refused with a message saying
// who holds it and what to do; the default directory, when held, gives way
// to a directory of this run's own, next to it, which this run keeps.
func openData(opts core.Options, chosen bool, stdout io.Writer) (*core.Runtime, error) {
	rt, err := core.Open(opts)
	var le *core.LockedError
	if !errors.As(err, &le) {
		return rt, err
	}
	if chosen {
		return nil, fmt.Errorf("%w\n  another server (or a test) runs on it: stop it, or pass another -data DIR", err)
	}
	own, merr := os.MkdirTemp(filepath.Dir(opts.Dir), filepath.Base(opts.Dir)+"-run-")
	if merr != nil {
		return nil, errors.Join(err, merr)
	}
	fmt.Fprintf(stdout, "cookbook: %v\n  this run uses a data directory of its own: %s (pass -data DIR to choose)\n", err, own)
	opts.Dir = own
	return core.Open(opts)
}

// defaultDataDir is a directory in the user's cache, or ./cookbook-data.
func defaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "durable-cookbook")
	}
	return "cookbook-data"
}

func envBool(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// printBanner prints the address and curl lines to try, which need only a
// POSIX shell and curl. The watch of the failing alarm looks at its state
// about 8 times over its ladder: every 20 s for the 2 min of 2 s ... 64 s
// (plus jitter), every second for the 6.5 s or so of -fast.
func printBanner(w io.Writer, addr, dir string, maxOpen int64, fast bool) {
	ladder := "2 s, 4 s, ... 64 s, as the original (-fast: 100 ms ... 3.2 s)"
	every := 20
	if fast {
		ladder, every = "100 ms, 200 ms, ... 3.2 s (-fast)", 1
	}
	fmt.Fprintf(w, `durable cookbook: the workshop
  page    http://%[1]s/
  data    %[2]s
  retries %[3]s
  cache   %[5]d open objects at most (MaxOpenObjects, sized by this machine; the log says from what)

the original's hands-on session:
  B=%[1]s
  curl -s "$B/reset"
  curl -s "$B/armtwice"          # one alarm per object
  curl -s "$B/deleteall?o=da"    # DeleteAll takes the alarm with it
  curl -s "$B/hit?n=5"           # five hits, one alarm
  sleep 4 && curl -s "$B/state"  # one flush, n=5
  curl -s "$B/reset?o=fail"; curl -s "$B/mode?o=fail&m=throw"; curl -s "$B/arm?o=fail&ms=500"
  for i in 1 2 3 4 5 6 7 8 9; do sleep %[4]d; curl -s "$B/state?o=fail"; done   # 7 runs, then none
  curl -s "$B/deadletters"       # where the original loses it
The patterns:
  curl -s "$B/limit?key=me&n=7"
  curl -s "$B/inventory/race?n=50&await=1ms"
  curl -s "$B/session/touch?id=s1&key=user&value=ada"; curl -s "$B/session/get?id=s1&key=user"
  curl -s "$B/counter/record?link=l1&n=5"; curl -s "$B/counter/stats?link=l1"
  curl -s "$B/routes"
Ctrl-C stops it.
`, addr, dir, ladder, every, maxOpen)
}
