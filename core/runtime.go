package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Runtime. The zero value is ready to use: a private
// temporary directory, durable commits, the original runtime's idle time.
type Options struct {
	// Dir is the data directory. Each namespace gets a subdirectory, each
	// object one SQLite file in it. "" means a private temporary directory
	// that Close removes.
	Dir string

	// IdleTimeout is how long an object with nothing to do stays in memory
	// before it is evicted (default 10 s).
	IdleTimeout time.Duration

	// MaxQueue bounds the calls waiting for one object (default 1024). A call
	// to a full queue fails at once with ErrOverloaded.
	MaxQueue int

	// MaxOpenObjects bounds the objects kept in memory with an open database
	// (default 1024). Past it, the least recently used idle objects are
	// evicted early. An open database costs about 150 KiB.
	MaxOpenObjects int

	// MaxBatch bounds the turns that share one group commit (default 1024).
	MaxBatch int

	// Synchronous is SQLite's synchronous setting for object databases:
	// "FULL" (the default: a commit survives power loss) or "NORMAL" (a
	// commit survives a crash of the process but perhaps not of the machine).
	Synchronous string

	// Logger receives the runtime's structured records (default slog.Default()).
	Logger *slog.Logger

	// AlarmRetry says when a failed alarm runs again (default: the original
	// runtime's 2 s doubling, 6 retries, up to 25% jitter).
	AlarmRetry RetryPolicy

	// AlarmTimeout is the wall-time limit of one alarm run (default 15
	// min). The run's context is cancelled then, and a run that overstays
	// counts as failed.
	AlarmTimeout time.Duration

	// AlarmConcurrency bounds the alarms running at once (default 64).
	AlarmConcurrency int

	// Now is the clock alarms and schedules are due by (default time.Now).
	// Tests and benchmarks may shift it; timers already waiting notice a
	// shift within 1 s. Idle eviction always uses time.Now.
	Now func() time.Time

	// OnAlarmDropped is called after an alarm that ran out of retries was
	// written to the dead-letter table. The default logs a structured
	// record with event=alarm_dropped at level ERROR.
	OnAlarmDropped func(DeadLetter)

	// WebSocketSendQueue bounds the messages waiting to be written to one
	// WebSocket (default 256). A client that falls further behind is cut
	// off with close code 1013 (see WebSocket.Send).
	WebSocketSendQueue int

	// WebSocketMaxMessage is the largest message, in bytes, accepted from a
	// WebSocket client (default 1 MiB); a larger one closes the connection
	// with close code 1009.
	WebSocketMaxMessage int64

	// WebSocketOrigins lists the browser origins ("https://app.example.com",
	// or "*" for any) allowed to open WebSockets besides the request's own
	// host. Requests without an Origin header (not from a browser) are
	// always allowed.
	WebSocketOrigins []string
}

func (o *Options) withDefaults() error {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 10 * time.Second
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 1024
	}
	if o.MaxOpenObjects <= 0 {
		o.MaxOpenObjects = 1024
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	switch o.Synchronous {
	case "":
		o.Synchronous = "FULL"
	case "FULL", "NORMAL":
	default:
		return fmt.Errorf("core: Options.Synchronous must be FULL or NORMAL, not %q", o.Synchronous)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.AlarmRetry = o.AlarmRetry.withDefaults()
	if o.AlarmTimeout <= 0 {
		o.AlarmTimeout = 15 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AlarmConcurrency <= 0 {
		o.AlarmConcurrency = 64
	}
	if o.WebSocketSendQueue <= 0 {
		o.WebSocketSendQueue = 256
	}
	if o.WebSocketMaxMessage <= 0 {
		o.WebSocketMaxMessage = 1 << 20
	}
	return nil
}

// Runtime hosts namespaces of objects over one data directory. It is safe
// for concurrent use. Open one per directory: two runtimes over the same
// directory would break the one-instance rule.
type Runtime struct {
	opts   Options
	dir    string
	ownDir bool
	log    *slog.Logger

	mu         sync.RWMutex // protects closed and namespaces
	closed     bool
	namespaces map[string]*namespace
	facets     map[string]*namespace // facet kinds by full name ("ns.kind.kind")

	calls sync.WaitGroup // calls in flight, waited for by Close

	stop chan struct{} // closed by Close to stop the janitor
	done chan struct{} // closed when the janitor has returned

	isClosed atomic.Bool
	stats    runtimeStats
	clock    atomic.Int64   // coarse time.Now, unix ns, updated by the janitor
	uses     atomic.Int64   // a sequence stamped on objects as they go idle, for LRU
	closers  sync.WaitGroup // databases being closed in the background
	sched    *scheduler

	templateOnce  sync.Once
	templateBytes []byte
	templateErr   error

	ws wsHub // the WebSocket connections (websocket.go)
}

// template returns the bytes of an empty object database, built once.
func (rt *Runtime) template() ([]byte, error) {
	rt.templateOnce.Do(func() { rt.templateBytes, rt.templateErr = buildTemplate(rt.dir) })
	return rt.templateBytes, rt.templateErr
}

type runtimeStats struct {
	turns, commits, constructs, evictions, resident, openDBs atomic.Int64
}

// Stats are counters over the runtime's life, for tests, benchmarks and
// monitoring.
type Stats struct {
	Turns      int64 // turns run (calls, constructors, event deliveries)
	Commits    int64 // durable commits of object databases (each one fsync with FULL)
	Constructs int64 // constructor runs
	Evictions  int64 // objects evicted from memory
	Resident   int64 // objects in memory now
	OpenDBs    int64 // object databases open now
	Alarms     int64 // alarms pending in the scheduler
}

// Open starts a runtime over opts.Dir.
func Open(opts Options) (*Runtime, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	rt := &Runtime{
		opts:       opts,
		log:        opts.Logger,
		namespaces: make(map[string]*namespace),
		facets:     make(map[string]*namespace),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "durable-")
		if err != nil {
			return nil, fmt.Errorf("core: open: %w", err)
		}
		rt.dir, rt.ownDir = d, true
	} else {
		d, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("core: open: %w", err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("core: open: %w", err)
		}
		rt.dir = d
	}
	if rt.opts.OnAlarmDropped == nil {
		rt.opts.OnAlarmDropped = rt.logDropped
	}
	sched, err := newScheduler(rt)
	if err != nil {
		if rt.ownDir {
			os.RemoveAll(rt.dir)
		}
		return nil, fmt.Errorf("core: open: %w", err)
	}
	rt.sched = sched
	rt.clock.Store(time.Now().UnixNano())
	go rt.janitor()
	return rt, nil
}

// Dir returns the absolute data directory.
func (rt *Runtime) Dir() string { return rt.dir }

// Stats returns a snapshot of the runtime's counters.
func (rt *Runtime) Stats() Stats {
	return Stats{
		Turns:      rt.stats.turns.Load(),
		Commits:    rt.stats.commits.Load(),
		Constructs: rt.stats.constructs.Load(),
		Evictions:  rt.stats.evictions.Load(),
		Resident:   rt.stats.resident.Load(),
		OpenDBs:    rt.stats.openDBs.Load(),
		Alarms:     int64(rt.sched.pending()),
	}
}

// Shutdown stops the runtime, waiting until ctx is done at the latest.
func (rt *Runtime) Shutdown(ctx context.Context) error { return rt.Close() }

// Close stops the runtime. New calls fail with ErrClosed at once; calls
// still queued for an object fail with ErrClosed when their turn comes.
// Close waits for the turns already running (including those inside Await)
// to finish and commit, then closes every database. A private temporary
// directory is removed.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	rt.isClosed.Store(true)
	rt.mu.Unlock()

	close(rt.stop)
	<-rt.done
	var errs []error
	rt.calls.Wait()
	rt.closers.Wait()
	// Fires started before Close hold calls too; stop the scheduler after
	// them so that their retries are recorded.
	errs = append(errs, rt.sched.closeLoop())
	rt.calls.Wait()
	errs = append(errs, rt.ws.close()) // 1001 to every WebSocket client (SEMANTICS R8)

	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			if o.tryEvict(true) {
				errs = append(errs, o.closeStore())
			}
		}
		ns.waitClosing()
	}
	errs = append(errs, rt.sched.closeIndex())
	if rt.ownDir {
		errs = append(errs, os.RemoveAll(rt.dir))
	}
	return errors.Join(errs...)
}

// enter registers a call in flight; it fails once the runtime is closed.
func (rt *Runtime) enter() error {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if rt.closed {
		return ErrClosed
	}
	rt.calls.Add(1)
	return nil
}

func (rt *Runtime) leave() { rt.calls.Done() }

// snapshotNamespaces lists the namespaces and facet kinds.
func (rt *Runtime) snapshotNamespaces() []*namespace {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	out := make([]*namespace, 0, len(rt.namespaces)+len(rt.facets))
	for _, ns := range rt.namespaces {
		out = append(out, ns)
	}
	for _, ns := range rt.facets {
		out = append(out, ns)
	}
	return out
}

// janitor evicts idle objects and keeps the coarse clock. It is owned by
// the runtime: Close stops it and waits for it.
func (rt *Runtime) janitor() {
	defer close(rt.done)
	every := rt.opts.IdleTimeout / 4
	every = min(max(every, time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-rt.stop:
			return
		case now := <-t.C:
			rt.clock.Store(now.UnixNano())
			rt.evictIdle(now)
		}
	}
}

// coarseNow is time.Now to within the janitor's tick (at most 1 s), at
// the cost of an atomic load: the turn gate stamps every release with it.
func (rt *Runtime) coarseNow() time.Time { return time.Unix(0, rt.clock.Load()) }

// evictIdle evicts every object idle for IdleTimeout.
func (rt *Runtime) evictIdle(now time.Time) {
	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			if o.idleSince(now) >= rt.opts.IdleTimeout && o.tryEvict(false) {
				o.closeStore()
			}
		}
	}
}

// shed evicts the least recently used idle objects while more than
// MaxOpenObjects databases are open.
func (rt *Runtime) shed() {
	over := rt.stats.openDBs.Load() - int64(rt.opts.MaxOpenObjects)
	if over <= 0 {
		return
	}
	type cand struct {
		o   *object
		use int64
	}
	var cands []cand
	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			if o.hasStore.Load() {
				if use := o.recency(); use >= 0 {
					cands = append(cands, cand{o, use})
				}
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].use < cands[j].use })
	for _, c := range cands {
		if over <= 0 {
			return
		}
		if c.o.tryEvict(false) {
			// Closing checkpoints the database: do it off the caller's
			// turn. An activation of the same object waits for it.
			ch := c.o.detach()
			rt.closers.Add(1)
			go func() {
				defer rt.closers.Done()
				c.o.closeRemoved(ch)
			}()
			over--
		}
	}
}

// now is the alarm clock.
func (rt *Runtime) now() time.Time { return rt.opts.Now() }

// background returns a context for runtime-internal work.
func (rt *Runtime) background() context.Context { return context.Background() }
