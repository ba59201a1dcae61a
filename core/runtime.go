package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/core/internal/runindex"
	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// Runtime hosts namespaces of objects over one data directory. It is safe for concurrent use. Open
// one per directory: two runtimes over the same directory would break the one-instance rule.
type Runtime struct {
	opts   Options
	dir    string
	ownDir bool
	log    *slog.Logger
	tel    *telemetryHooks // nil: metrics and traces are off (seams.go)

	mu         sync.RWMutex // protects namespaces and facets; taken to set isClosed
	namespaces map[string]*namespace
	facets     map[string]*namespace // facet kinds by full name ("ns.kind.kind")
	shut       sync.Mutex            // serializes Shutdown; protects shutDone
	shutDone   bool
	drained    chan struct{} // signalled when calls drops to 0 after Shutdown began

	base     context.Context // turns, Await, alarm runs and deliveries derive from it
	cancel   context.CancelFunc
	stop     chan struct{} // closed by Shutdown to stop the janitor
	done     chan struct{} // closed when the janitor has returned
	wake     chan struct{} // an object became resident: the janitor has work
	isClosed atomic.Bool

	// Written by every call (calls) and every turn (running, counts), each on cache lines of its
	// own: under contention the callers and the goroutine running their turns are on different
	// cores, and a write to one of these must not take from the other core the line of a field it
	// reads or writes (isClosed, tel and opts above, the other counters).
	_       cacheLinePad
	calls   atomic.Int64 // calls, fires and background work in flight, waited for by Shutdown
	_       cacheLinePad
	running atomic.Int64 // turns whose code is running (in invoke), on any object
	_       cacheLinePad
	counts  telemetry.Counts // the runtime's counters, read by Stats and by the metrics
	_       cacheLinePad

	clock     atomic.Int64 // the coarse runtime clock, unix ns, updated by the janitor
	uses      atomic.Int64 // a sequence stamped on objects as they go idle, for LRU
	quietDBs  atomic.Int64 // open object databases quiesced (object.quiesce)
	parkedDBs atomic.Int64 // open object databases parked (object.park)
	closing   sync.Map     // *object -> time.Time: evicted databases being closed
	checked   sync.Map     // database path -> struct{}: passed its header checks in this runtime (damage.go)
	damaged   sync.Map     // database path -> string: found damaged, why (damage.go)
	checks    checkQueue   // files waiting for their background check (damage.go)
	shedding  sync.Mutex   // held by the one caller of shed evicting
	sched     *runindex.Scheduler
	ix        *runindex.Index        // the alarm index, the catalog and the dead letters
	template  func() ([]byte, error) // an empty object database, built once
	ws        wsHub                  // the WebSocket connections
	lock      *datadir.Lock          // the data directory's OS lock, held until Shutdown ends
	cluster   *replica.Node          // cluster mode: the node's leases; nil in the single-process runtime
	router    *router                // cluster mode with Replication.Calls: calls between nodes (route.go)
	methods   sync.Map               // "namespace\x00method" -> methodFunc: the methods Define made (route.go)
}

// cacheLinePad keeps the fields on either side of it off each other's cache lines.
type cacheLinePad struct{ _ [64]byte }

// Stats are counters over the runtime's life, for tests, benchmarks and monitoring.
type Stats struct {
	Turns      int64 // turns run (calls, constructors, event deliveries)
	Commits    int64 // durable commits of object databases (each one fsync with FULL)
	Constructs int64 // constructor runs
	Evictions  int64 // objects evicted from memory
	Resident   int64 // objects in memory now
	OpenDBs    int64 // object databases open now
	QuietDBs   int64 // of those, databases of idle objects that gave their memory back (see Options.IdleTimeout)
	ParkedDBs  int64 // of those, databases of idle objects parked: connection closed, file kept (see Options.IdleTimeout)
	Alarms     int64 // alarms pending in the scheduler

	// MaxOpenObjects is the bound on open databases in force: Options.MaxOpenObjects, or the
	// default sized by the machine (see Options.MaxOpenObjects).
	MaxOpenObjects int64

	Cluster ClusterStats // cluster mode's (zero without Options.Replication)
}

// Open starts a runtime over opts.Dir.
func Open(opts Options) (*Runtime, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	if err := opts.Replication.validate(); err != nil {
		return nil, err
	}
	cache := sizeCache(opts.MaxOpenObjects)
	opts.MaxOpenObjects = cache.max
	rt := &Runtime{
		opts:       opts,
		log:        opts.Logger,
		namespaces: make(map[string]*namespace),
		facets:     make(map[string]*namespace),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		wake:       make(chan struct{}, 1),
		drained:    make(chan struct{}, 1),
	}
	rt.base, rt.cancel = context.WithCancel(context.Background())
	var err error
	if rt.tel, err = telemetry.New(opts.Meter, opts.Tracer, rt.telemetrySource()); err != nil {
		return nil, fmt.Errorf("core: open: telemetry: %w", err)
	}
	if rt.ownDir = opts.Dir == ""; rt.ownDir {
		rt.dir, err = os.MkdirTemp("", "durable-")
	} else if rt.dir, err = filepath.Abs(opts.Dir); err == nil {
		err = os.MkdirAll(rt.dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("core: open: %w", err)
	}
	if err := checkNotIncompleteBackup(rt.dir); err != nil {
		return nil, err
	}
	if rt.lock, err = lockDir(rt.dir); err != nil {
		if rt.ownDir {
			os.RemoveAll(rt.dir)
		}
		var le *LockedError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, fmt.Errorf("core: open: %w", err)
	}
	if rt.opts.OnAlarmDropped == nil {
		rt.opts.OnAlarmDropped = rt.logDropped
	}
	rt.template = sync.OnceValues(func() ([]byte, error) { return sqlstore.BuildTemplate(rt.dir, runtimeSchema) })
	if err = rt.openReplication(); err != nil {
		rt.lock.Unlock()
		if rt.ownDir {
			os.RemoveAll(rt.dir)
		}
		return nil, fmt.Errorf("core: open: %w", err)
	}
	if err = rt.startScheduler(); err != nil {
		rt.router.stop()
		if rt.cluster != nil {
			rt.cluster.Close()
		}
		rt.lock.Unlock()
		if rt.ownDir {
			os.RemoveAll(rt.dir)
		}
		return nil, fmt.Errorf("core: open: %w", err)
	}
	rt.serveClusterAlarms()
	rt.clock.Store(rt.now().UnixNano())
	rt.log.Info("object cache: "+cache.String(), "event", "max_open_objects", "max", cache.max, "by", cache.by,
		"fd_limit", cache.fdLimit, "fd_raised", cache.fdRaised, "memory", cache.memory)
	go rt.janitor()
	return rt, nil
}

// Dir returns the absolute data directory.
func (rt *Runtime) Dir() string { return rt.dir }

// Stats returns a snapshot of the runtime's counters.
func (rt *Runtime) Stats() Stats {
	c := rt.counts.Totals()
	return Stats{Turns: c.Turns, Commits: c.Commits, Constructs: c.Constructs, Evictions: c.Evictions,
		Resident: c.Resident, OpenDBs: c.OpenDBs, QuietDBs: rt.quietDBs.Load(), ParkedDBs: rt.parkedDBs.Load(), Alarms: int64(rt.sched.Pending()), MaxOpenObjects: int64(rt.opts.MaxOpenObjects),
		Cluster: rt.clusterStats()}
}

// telemetrySource is what the metrics read of the runtime at each collection.
func (rt *Runtime) telemetrySource() telemetry.Source {
	return telemetry.Source{
		Namespaces: func(yield func(*telemetry.Namespace, telemetry.Sample)) {
			conns := rt.ws.counts()
			for _, ns := range rt.snapshotNamespaces() {
				yield(ns.stat, ns.sample(conns[ns]))
			}
		},
		Cluster: func() (telemetry.Cluster, bool) {
			if rt.cluster == nil {
				return telemetry.Cluster{}, false
			}
			st := rt.clusterStats()
			return telemetry.Cluster{Commits: st.Commits, Records: st.Records, RecordBytes: st.RecordBytes, PageBytes: st.PageBytes,
				Snapshots: st.Snapshots, HeldLeases: st.HeldLeases, WatchedLeases: st.WatchedLeases}, true
		},
	}
}

// Shutdown stops the runtime. New calls fail with ErrClosed at once, and calls still queued for an
// object fail with ErrClosed when their turn comes. Shutdown cancels the runtime's base context,
// from which the contexts of turns (as they see it through Done), of Await's functions, of alarm
// runs and of WebSocket deliveries derive, and waits for what is running to finish and commit. Then
// it closes every WebSocket (1001) and every database. A private temporary directory is removed.
//
// If ctx ends first, Shutdown returns an error that wraps ctx's error and names what it abandoned
// (turns still running, databases still closing); the runtime stays closed to new work, what was
// abandoned keeps its resources, and a later Shutdown or Close goes on from there. In cluster mode
// the objects that nothing is using are closed then all the same, and their leases handed back,
// as Shutdown returns.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	rt.mu.Lock()
	if !rt.isClosed.Swap(true) {
		close(rt.stop)
		rt.cancel()
	}
	rt.mu.Unlock()
	rt.stopChecks()
	if rt.cluster != nil {
		// Cluster mode: no shard is taken from now on, and each goes back as its last object is
		// evicted below; the other nodes hear that this one drains.
		rt.cluster.Drain()
	}
	rt.shut.Lock() // one Shutdown at a time; a later one goes on where an abandoned one stopped
	defer rt.shut.Unlock()
	if rt.shutDone {
		return nil
	}
	<-rt.done
	evictIdle := func() {
		for _, ns := range rt.snapshotNamespaces() {
			for _, o := range ns.snapshot() {
				if o.tryEvict() {
					o.evict("shutdown")
				}
			}
		}
	}
	waitCalls := func() error {
		for rt.calls.Load() > 0 {
			select {
			case <-rt.drained:
			case <-ctx.Done():
				if rt.cluster != nil {
					// Cluster mode: the objects nothing is using go now, and their leases back,
					// so that other nodes need not wait for a process that may never finish.
					evictIdle()
				}
				return fmt.Errorf("core: shutdown: %w; abandoned: %s", ctx.Err(), strings.Join(rt.busy(), ", "))
			}
		}
		return nil
	}
	if err := waitCalls(); err != nil {
		return err
	}
	// Fires started before Shutdown hold calls too; stop the scheduler after them so that their
	// retries are recorded.
	errs := []error{rt.sched.Close()}
	if err := waitCalls(); err != nil {
		return err
	}
	rt.ws.closeOwn() // 1001 to every WebSocket client of an object here (SEMANTICS R8)
	// The objects close, and their shards' leases go back: in cluster mode handed over to the next
	// owners, with the handles of the other nodes' connections (CL18), so the relay still runs.
	evictIdle()
	if err := waitCalls(); err != nil {
		return err
	}
	errs = append(errs, rt.ws.closeRelay())
	rt.router.stop()       // no call is under way: serve no more
	if rt.cluster != nil { // the objects are closed and their leases handed back: stop renewing
		errs = append(errs, rt.cluster.Close())
	}
	errs = append(errs, rt.ix.Close())
	if rt.ownDir {
		errs = append(errs, os.RemoveAll(rt.dir))
	}
	errs = append(errs, rt.lock.Unlock()) // the directory is free for the next runtime
	rt.tel.Close()
	rt.shutDone = true
	return errors.Join(errs...)
}

// Close is Shutdown with a bound of CloseTimeout.
func (rt *Runtime) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	return rt.Shutdown(ctx)
}

// busy names the objects with turns still running or waiting, and the databases still closing.
func (rt *Runtime) busy() []string {
	var out []string
	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			if d, _ := o.idleSince(time.Time{}); d < 0 {
				out = append(out, fmt.Sprintf("%s/%q (a turn is running)", ns.name, o.place.name))
			}
		}
	}
	rt.closing.Range(func(k, v any) bool {
		o := k.(*object)
		out = append(out, fmt.Sprintf("%s/%q (its database is closing since %v)", o.ns.name, o.place.name, v.(time.Time).Format(time.RFC3339)))
		return true
	})
	sort.Strings(out)
	return append(out, fmt.Sprintf("%d calls in flight", rt.calls.Load()))
}

// goWork runs fn in the background, owned by the runtime: Shutdown waits for it.
func (rt *Runtime) goWork(fn func()) {
	rt.calls.Add(1)
	go func() {
		defer rt.leave()
		fn()
	}()
}

// hook calls one of the user's hooks, recovering and logging a panic in it.
func (rt *Runtime) hook(name string, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			rt.log.Error("a hook panicked", "event", "hook_panic", "hook", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// enter registers a call in flight; it fails once the runtime is closed. Shutdown sets isClosed
// before it reads calls, and leave decrements calls before it reads isClosed: one of them sees the
// other.
func (rt *Runtime) enter() error {
	rt.calls.Add(1)
	if rt.isClosed.Load() {
		rt.leave()
		return ErrClosed
	}
	return nil
}

func (rt *Runtime) leave() {
	if rt.calls.Add(-1) == 0 && rt.isClosed.Load() {
		signal(rt.drained)
	}
}

// signal wakes the one waiter of ch, a channel of capacity 1, if it is not awake already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// snapshotNamespaces lists the namespaces and facet kinds.
func (rt *Runtime) snapshotNamespaces() []*namespace {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return slices.AppendSeq(slices.Collect(maps.Values(rt.namespaces)), maps.Values(rt.facets))
}

// janitor evicts idle objects and keeps the coarse clock. It ticks only while objects are resident.
// It is owned by the runtime: Shutdown stops it and waits for it.
func (rt *Runtime) janitor() {
	defer close(rt.done)
	every := rt.tick()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if rt.counts.Resident() == 0 {
			t.Stop()
			select {
			case <-rt.stop:
				return
			case <-rt.wake:
			}
			rt.clock.Store(rt.now().UnixNano())
			t.Reset(every)
		}
		select {
		case <-rt.stop:
			return
		case <-t.C:
			now := rt.now()
			rt.clock.Store(now.UnixNano())
			rt.sched.Poke() // the clock may have moved
			rt.evictIdle(now)
		}
	}
}

// coarseNow is the runtime's clock to within the janitor's tick (at most 250 ms), at the cost of an
// atomic load: the gate stamps every release with it.
func (rt *Runtime) coarseNow() time.Time { return time.Unix(0, rt.clock.Load()) }

// tick is the janitor's period, and how far behind the coarse clock can be.
func (rt *Runtime) tick() time.Duration {
	return min(max(rt.opts.IdleTimeout/40, time.Millisecond), 250*time.Millisecond)
}

// evictIdle evicts every object idle for IdleTimeout: by the coarse clock that stamped it, for
// IdleTimeout and one tick. An object idle for quietAfter keeps its database open, but gives back
// the memory its turns left there (object.quiesce); one idle for parkAfter keeps its file but not
// its connection (object.park). At most maxQuietPerTick objects a tick are quiesced, and as many
// parked, so the tick stays short.
func (rt *Runtime) evictIdle(now time.Time) {
	quiesce, park := maxQuietPerTick, maxQuietPerTick
	parkAfter, parks := rt.parkAfter()
	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			switch d, _ := o.idleSince(now); {
			case d >= rt.opts.IdleTimeout+rt.tick():
				if o.tryEvict() {
					o.evict("idle")
				}
			case o.parked.Load() || !o.hasStore.Load():
			case parks && park > 0 && d >= parkAfter && o.park(now, parkAfter):
				park--
			case quiesce > 0 && !o.quiet.Load() && o.quiesce(now, rt.quietAfter()):
				quiesce--
			}
		}
	}
}

// maxQuietPerTick bounds the databases one janitor tick quiesces, and those it parks.
const maxQuietPerTick = 256

// quietAfter is how long an object has nothing to do before its open database gives back its
// memory: a second, or half IdleTimeout if that is shorter. An object busier than that keeps its
// page cache and statements.
func (rt *Runtime) quietAfter() time.Duration { return min(time.Second, rt.opts.IdleTimeout/2) }

// parkAfter is how long an object has nothing to do before its database is parked (its connection
// closed, its file kept; sqlstore.Park), and whether databases are parked at all: not in cluster
// mode, whose replicator works on the connection. It is half IdleTimeout, halfway to the eviction:
// with the default IdleTimeout an object idle for 5 s is parked, and evicted 5 s later if nothing
// calls it meanwhile. A longer IdleTimeout keeps an object quick to call (its connection open) for
// longer as well as resident: a reopen costs a call a few hundred microseconds of CPU.
func (rt *Runtime) parkAfter() (time.Duration, bool) {
	return rt.opts.IdleTimeout / 2, rt.cluster == nil
}

// shed evicts the least recently used idle objects once more than MaxOpenObjects databases are
// open, down to shedTarget, so that the scan of the resident objects it costs is paid once per
// many activations, not by each. The databases close in the background (evict). One caller sheds
// at a time; the others go on, as the one shedding evicts for them too.
func (rt *Runtime) shed() {
	if rt.counts.OpenDBs() <= int64(rt.opts.MaxOpenObjects) || !rt.shedding.TryLock() {
		return
	}
	defer rt.shedding.Unlock()
	over := rt.counts.OpenDBs() - int64(rt.shedTarget())
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
			if _, use := o.idleSince(time.Time{}); use >= 0 && o.hasStore.Load() {
				cands = append(cands, cand{o, use})
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.use, b.use) })
	for _, c := range cands {
		if over > 0 && c.o.tryEvict() {
			c.o.evict("max_open_objects")
			over--
		}
	}
}

// shedTarget is the number of open databases shed leaves: MaxOpenObjects less one in 16.
func (rt *Runtime) shedTarget() int { return rt.opts.MaxOpenObjects - rt.opts.MaxOpenObjects/16 }

// now is the runtime's clock.
func (rt *Runtime) now() time.Time { return rt.opts.Now() }
