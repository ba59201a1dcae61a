package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/durable-go/durable/patterns/inventory"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/durable-go/durable/patterns/room"
	"github.com/durable-go/durable/patterns/session"
)

// appConfig configures the workshop's objects. The zero value is the
// original's numbers.
type appConfig struct {
	Debounce   time.Duration // the lab's flush after the first hit (default 2 s)
	SessionTTL time.Duration // default session.DefaultTTL (30 min)
	FlushAfter time.Duration // the link counter's flush (default 30 s)
	StorePath  string        // the counters' analytics store (SQLite file); required
	Logger     *slog.Logger  // default slog.Default()
	Metrics    http.Handler  // served at GET /metrics if set
}

// app is the workshop: one namespace per pattern over one runtime, and the
// HTTP API over them.
type app struct {
	rt  *core.Runtime
	cfg appConfig
	log *slog.Logger

	labs     *core.Namespace[*Lab]
	limits   *core.Namespace[*limiter.Limiter]
	sessions *core.Namespace[*session.Session]
	counters *core.Namespace[*counter.Counter]
	rooms    *core.Namespace[*room.Room]
	store    *counter.Store
	m        methods // what the pattern routes call (methods.go)

	invMu sync.Mutex // protects invs
	invs  map[time.Duration]*core.Namespace[*inventory.Inventory]

	raceMu sync.Mutex // one race at a time: races reuse their two items
}

// newApp registers the workshop's namespaces in rt and opens the counters'
// store. Close (or shut down) the runtime first, then the app.
func newApp(rt *core.Runtime, cfg appConfig) (*app, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &app{rt: rt, cfg: cfg, log: cfg.Logger, invs: make(map[time.Duration]*core.Namespace[*inventory.Inventory])}
	var err error
	if a.labs, err = core.Register(rt, "lab", labOptions{Debounce: cfg.Debounce}.newLab); err != nil {
		return nil, err
	}
	if a.limits, err = core.Register(rt, "limits", limiter.New); err != nil {
		return nil, err
	}
	if a.sessions, err = core.Register(rt, "sessions", session.Options{TTL: cfg.SessionTTL, Logger: cfg.Logger}.New); err != nil {
		return nil, err
	}
	if a.store, err = counter.OpenStore(cfg.StorePath); err != nil {
		return nil, err
	}
	if a.counters, err = core.Register(rt, "counters", counter.Options{Sink: a.store, FlushAfter: cfg.FlushAfter, Logger: cfg.Logger}.New); err != nil {
		a.store.Close()
		return nil, err
	}
	if a.rooms, err = room.Register(rt, "rooms", room.Options{}); err != nil {
		a.store.Close()
		return nil, err
	}
	if err = a.defineMethods(); err != nil {
		a.store.Close()
		return nil, err
	}
	return a, nil
}

// Close closes the counters' store. Close (or shut down) the runtime
// first: a flush may be writing to the store until then.
func (a *app) Close() error { return a.store.Close() }

// handler returns the HTTP API, the rooms and the page, with bounded
// bodies and panics answered as 500.
func (a *app) handler() http.Handler {
	rt := &router{routes: map[string]route{}, rooms: http.HandlerFunc(a.room), page: pageHandler(), insp: inspectorHandler(), log: a.log}
	add := func(method, path, doc string, fn apiFunc) {
		rt.routes[path] = route{method: method, path: path, doc: doc, fn: fn}
	}
	// the original's hands-on session, object chosen by ?o=.
	add("GET", "/reset", "clear the object: storage, alarm, events (?o=)", a.reset)
	add("GET", "/armtwice", "one alarm per object: arm +30 s, then +60 s, delete (?o=)", a.armTwice)
	add("GET", "/deleteall", "DeleteAll takes the alarm with it (?o=)", a.deleteAll)
	add("GET", "/hit", "n hits, the flush armed only if no alarm is pending (?o=&n=5)", a.hit)
	add("GET", "/state", "pending alarm, hits not flushed, events (?o=&timeline=1)", a.state)
	add("GET", "/mode", "the alarm handler succeeds, always throws, or throws twice (?o=&m=ok|throw|flaky)", a.mode)
	add("GET", "/arm", "arm the alarm ms from now (?o=&ms=500)", a.arm)
	add("GET", "/deadletters", "alarms that ran out of retries (?o= to filter)", a.deadLetters)
	add("POST", "/deadletters/rearm", "arm a dead letter again ms from now (?seq=&ms=0)", a.rearm)
	// The other patterns.
	add("GET", "/limit", "n checks of a sliding-window limiter (?key=&n=7&limit=5&window=60s)", a.limit)
	add("GET", "/inventory/race", "n concurrent reserves, safe and racy side by side (?n=50&await=1ms)", a.race)
	add("GET", "/session/touch", "extend a session, or set a value in it (?id=&key=&value=)", a.sessionTouch)
	add("GET", "/session/get", "read a session's value (?id=&key=)", a.sessionGet)
	add("GET", "/session/end", "end a session now (?id=)", a.sessionEnd)
	add("GET", "/counter/record", "count n hits on a link, flushed 30 s later (?link=&n=1)", a.counterRecord)
	add("GET", "/counter/stats", "a link's total and what the analytics store holds (?link=)", a.counterStats)
	add("GET", "/objects", "a namespace's objects with storage, from the runtime's catalog (?ns=lab&after=&limit=20)", a.objects)
	add("GET", "/inspect/namespaces", "the catalog's namespaces, the dead letters' count and the runtime's stats", a.inspectNamespaces)
	add("GET", "/inspect/objects", "any namespace's objects from the catalog, a page at a time (?ns=&after=&limit=20)", a.inspectObjects)
	add("GET", "/inspect/object", "one object: tables, alarm, timers with retry state, dead letters, WebSockets (?ns=&name=)", a.inspectObject)
	add("GET", "/inspect/sql", "a read-only SQL query in the object's turn; writes are refused (?ns=&name=&q=&limit=100)", a.inspectSQL)
	add("GET", "/api/cluster", "cluster mode: the members (name, address, alive, ready, draining, shards held) and each shard's owner, as this node knows them", a.cluster)
	add("GET", "/routes", "this list", func(*http.Request) (any, error) { return map[string]any{"routes": rt.list()}, nil })
	h := withLimits(a.log, rt)
	mux := http.NewServeMux()
	rt.extra = append(rt.extra, healthzRoute, readyzRoute)
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	if a.cfg.Metrics != nil {
		rt.extra = append(rt.extra, metricsRoute)
		mux.Handle("GET /metrics", a.cfg.Metrics) // the runtime's metrics, in Prometheus's format
	}
	mux.Handle("/", h)
	return mux
}

// healthz answers 200 while the server runs: the process is alive and serving HTTP.
func (a *app) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 once the server can serve calls, and 503 saying why not: in cluster mode,
// until the node has heard the others' beats and its engine answers, and from the moment it
// drains (a rolling restart waits for a node's 200 before it stops the next one).
func (a *app) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := a.rt.Stats().Cluster.Ready; err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ready")
}
