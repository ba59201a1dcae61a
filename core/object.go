package core

import (
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// errEvicted tells a caller that the object it found was evicted before it could queue; the caller
// looks the object up again. It never leaves core.
var errEvicted = errors.New("core: object evicted")

// object is one live instance of a (namespace, name) address: its gate (gate.go) and its lifecycle
// (activation, idleness, eviction, and in cluster mode its replicator). What a turn does with it is
// in turn.go and batch.go.
type object struct {
	// Set when the object is made, never changed; read by anyone.
	ns    *namespace
	rt    *Runtime
	name  string
	id    string
	place placement
	repl  replicator  // cluster mode's side of the object; nil in the single-process runtime
	gone  atomic.Bool // mirrors evicted for lock-free checks (set once), read by every call

	// The gate holder's: touched only in turn.go, batch.go, gate.go and object.go; other files ask
	// through hasInstance, openStore, unload, and the turn's own methods. Kept between the fields
	// every caller reads (above) and the gate's (below), which callers and the gate holder write
	// from different cores.
	state     State // what its code is given; its reset and block fields are the gate holder's
	inst      any
	built     bool
	store     *store
	fresh     bool          // the runtime's tables are not set up in store yet
	batch     *batch        // open group-commit batch, nil when nothing is uncommitted
	lastBatch int           // turns in the last batch committed
	expect    int           // turns the next batch is expected to hold: the last batch's, and those queued as it committed
	lastShip  time.Duration // how long the last batch's append to the log took (cluster mode)
	holding   *turn         // the turn of a hold (turn.go): the gate held without an instance

	// The gate holder's, for the alarm run: touched only in alarm.go.
	alarmRun *alarmRun

	// Atomic: read by anyone, written as each says.
	alarmBusy  atomic.Bool  // a run of due timers is under way (it may be inside Await; alarm.go)
	alarmAgain atomic.Bool  // a fire came meanwhile: the run looks again when it ends (alarm.go)
	hasStore   atomic.Bool  // a database is open and counted (cleared as an eviction begins)
	quiet      atomic.Bool  // its database is quiesced (set by quiesce, cleared by woke)
	parked     atomic.Bool  // its database is parked (set by park, cleared by unparked)
	reads      atomic.Int64 // rows read by its turns (storage.go)
	writes     atomic.Int64 // rows written by its turns (storage.go)

	mu         sync.Mutex // protects the fields down to arrival: the gate's queue (gate.go) and idleness
	held       bool       // the gate is taken (by a turn, or by eviction)
	head, tail *waiter    // FIFO of callers waiting for the gate
	qlen       int        // waiters not cancelled
	awaiting   int        // turns inside Await (the gate is open for them)
	evicted    bool
	lastActive int64                  // for idle eviction, by the runtime's clock (unix ns)
	lastUse    int64                  // the runtime's use sequence at the last release, for LRU order
	free       []*waiter              // recycled waiters (their channels belong to this object)
	arrival    chan struct{}          // closed by the next caller to queue, while the gate holder gathers (batch.go)
	holder     atomic.Pointer[turn]   // the turn holding the gate (gate.go), for deadlock checks; written with mu held
	spare      atomic.Pointer[waiter] // a recycled waiter, given back without mu (gate.go's recycle)
}

// placement is where an object lives, fixed when it is created: the name its code sees, its
// database file, the directory of its facets, and whose timers table holds its timers.
type placement struct {
	name   string
	db     string
	facets string
	timers timerHome
}

// topPlace places a top-level object: its own timers table, its files in its namespace's directory.
func topPlace(ns *namespace, name, id string) placement {
	return placement{name: name, db: datadir.DBFile(ns.dir, id), facets: datadir.FacetsDir(ns.dir, id),
		timers: timerHome{ns: ns, name: name, id: id}}
}

func newObject(ns *namespace, name, id string, place placement) *object {
	if place.db == "" { // a top-level object
		place = topPlace(ns, name, id)
	}
	o := &object{ns: ns, rt: ns.rt, name: name, id: id, place: place, lastActive: ns.rt.clock.Load()}
	o.state.o = o
	o.state.storage.o = o
	if n := ns.rt.cluster; n != nil {
		if h := o.place.timers; h.owner != "" { // a facet writes in its root's log (SEMANTICS CL11)
			o.repl = n.Facet(h.ns.name, h.name, o.dbTag(), o.place.db)
		} else {
			o.repl = n.Object(ns.name, name, o.place.db)
		}
	}
	return o
}

// dbTag names a facet's database in its root's log: its file's path below the root's facets
// directory.
func (o *object) dbTag() string {
	h := o.place.timers
	rel, _ := filepath.Rel(datadir.FacetsDir(h.ns.dir, h.id), o.place.db)
	return filepath.ToSlash(rel)
}

// facetsTag names the facets below the object in its root's log: every one below a root (""), the
// databases in a facet's own facets directory.
func (o *object) facetsTag() string {
	h := o.place.timers
	if h.owner == "" {
		return ""
	}
	rel, _ := filepath.Rel(datadir.FacetsDir(h.ns.dir, h.id), o.place.facets)
	return filepath.ToSlash(rel) + "/"
}

// idleSince reports how long the object has had nothing to do, or -1 if it is busy, and its use
// sequence for LRU order.
func (o *object) idleSince(now time.Time) (time.Duration, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held || o.qlen > 0 || o.awaiting > 0 {
		return -1, -1
	}
	return now.Sub(time.Unix(0, o.lastActive)), o.lastUse
}

// tryEvict takes the gate for good if the object is idle. The caller must then detach it and close
// its database.
func (o *object) tryEvict() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.evicted || o.held || o.head != nil || o.awaiting > 0 {
		return false
	}
	o.evicted, o.held = true, true
	o.gone.Store(true)
	return true
}

// quiesce makes the open database of an idle object give back the memory its turns left there:
// page cache, statements, lookaside (sqlstore.Quiesce); its next turn takes what it needs again.
// It reports whether it quiesced the database (see whileIdle).
func (o *object) quiesce(now time.Time, after time.Duration) (done bool) {
	o.whileIdle(now, after, func() {
		if st := o.store; st != nil && !st.Quiet() {
			if err := st.Quiesce(o.woke); err != nil {
				o.rt.log.Warn("an idle object's database could not give its memory back", "event", "quiesce_failed",
					"namespace", o.ns.name, "name", o.place.name, "error", err)
			} else {
				o.quiet.Store(true)
				o.rt.quietDBs.Add(1)
				done = true
			}
		}
	})
	return done
}

// park closes the connection of an idle object's database and keeps its file, locked, in one
// descriptor (sqlstore.Park); its next turn opens the connection again. It reports whether it
// parked the database (see whileIdle).
func (o *object) park(now time.Time, after time.Duration) (done bool) {
	o.whileIdle(now, after, func() {
		st := o.store
		if st == nil || st.Parked() {
			return
		}
		parked, err := st.Park(o.unparked)
		if parked {
			o.parked.Store(true)
			o.rt.parkedDBs.Add(1)
			done = true
		}
		if err != nil {
			o.rt.log.Warn("an idle object's database could not be parked", "event", "park_failed",
				"namespace", o.ns.name, "name", o.place.name, "error", err)
		}
	})
	return done
}

// whileIdle runs fn holding the gate if the object has been idle for after (by now), taking the
// gate in the same step as it checks, as tryEvict does, and frees it without counting as a use: the
// object's idle time (for eviction) and its place in the LRU order stay as they were. A caller that
// queued meanwhile is handed the gate.
func (o *object) whileIdle(now time.Time, after time.Duration, fn func()) {
	o.mu.Lock()
	if o.evicted || o.held || o.head != nil || o.awaiting > 0 || now.Sub(time.Unix(0, o.lastActive)) < after {
		o.mu.Unlock()
		return
	}
	o.held = true
	o.mu.Unlock()
	fn()
	o.mu.Lock()
	if o.head == nil { // the gate is free again, with the object's last use as it was
		o.held = false
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.release()
}

// woke is told by a quiesced database when it is used again, parked or closed.
func (o *object) woke() {
	o.quiet.Store(false)
	o.rt.quietDBs.Add(-1)
}

// unparked is told by a parked database when it is used again or closed.
func (o *object) unparked() {
	o.parked.Store(false)
	o.rt.parkedDBs.Add(-1)
}

// detach is the first half of an eviction: the object leaves its namespace (an activation of the
// same name now waits for the close) and stops counting as open.
func (o *object) detach() chan struct{} {
	ch := o.ns.remove(o)
	o.uncount()
	o.rt.counts.Evicted(o.ns.stat)
	return ch
}

// closeRemoved is the second half: the database is closed (which checkpoints it only past
// sqlstore.WALTrim of log, or with synchronous=NORMAL: see sqlstore.Open).
func (o *object) closeRemoved(ch chan struct{}) (err error) {
	defer o.ns.closed(o.id, ch)
	if o.inst, o.built = nil, false; o.store != nil {
		err = o.closeDB()
		o.touchCatalog()
	}
	if o.repl != nil { // evicted: the lease goes back, another node may take it at once
		err = errors.Join(err, o.repl.Release())
	}
	return err
}

// evict finishes an eviction off the caller's goroutine: closing a database may checkpoint it. An
// activation of the same object waits for it; Shutdown waits for it too, and reports it if it does
// not end. reason says why (idle, max_open_objects, shutdown, backup).
func (o *object) evict(reason string) {
	ch := o.detach()
	o.logEviction(reason)
	o.rt.closing.Store(o, o.rt.now())
	o.rt.goWork(func() {
		defer o.rt.closing.Delete(o)
		if err := o.closeRemoved(ch); err != nil {
			o.rt.log.Warn("closing an evicted object's database failed", "event", "close_failed",
				"namespace", o.ns.name, "name", o.name, "error", err)
		}
	})
}

// logEviction records an eviction (counted by detach).
func (o *object) logEviction(reason string) {
	o.rt.log.Debug("object evicted", "event", "evicted", "namespace", o.ns.name, "name", o.place.name, "reason", reason)
}

// refused handles a call the gate refused: full queue or a deadlock.
func (o *object) refused(err error) error {
	switch {
	case errors.Is(err, ErrOverloaded):
		o.ns.count(telemetry.Overloaded)
	case errors.Is(err, ErrDeadlock):
		o.rt.log.Warn("a call that could never run was refused", "event", "deadlock_refused",
			"namespace", o.ns.name, "name", o.place.name, "error", err)
	}
	return err
}

// claim makes the object servable by this node for a turn, in cluster mode (see replica.Object's
// Claim). A node that lost the object to another fails it.
func (o *object) claim() error { return o.claimed(o.repl.Claim(o)) }

// inShard reports whether the object is of shard, in cluster mode.
func (o *object) inShard(shard int) bool { return o.repl != nil && o.repl.Shard() == shard }

// resume is claim for a turn that goes on after Await (see replica.Object's Resume).
func (o *object) resume() error { return o.claimed(o.repl.Resume(o)) }

func (o *object) claimed(err error) error {
	if no := (*replica.NotOwner)(nil); errors.As(err, &no) {
		return &NotOwnerError{Key: no.Key, Holder: no.Holder, Address: o.rt.cluster.AddrOf(no.Holder), Until: no.Until,
			own: no.Holder == o.rt.cluster.Name()}
	}
	if errors.Is(err, ErrFenced) {
		return o.fail(err)
	}
	return err
}

// alarmFired counts a due timer's run and how late it is, by the runtime's clock.
func (o *object) alarmFired(late time.Duration) { o.rt.tel.AlarmFired(o.ns.stat, late) }

// count counts an event of an object of ns's (a call refused, an alarm retried or given up, a
// WebSocket message in or out, a slow client cut off) in the namespace's metrics.
func (ns *namespace) count(e telemetry.Event) { ns.rt.tel.Count(ns.stat, e) }

// The object as cluster mode's replica.Object sees it (replica.Host): its database.

// OpenDB opens the object's local file, checked.
func (o *object) OpenDB() (*store, bool, error) { return o.openDB() }

// AdoptDB makes st the object's database.
func (o *object) AdoptDB(st *store, fresh bool) {
	o.store, o.fresh = st, fresh
	o.hasStore.Store(true)
	o.rt.counts.Opened(o.ns.stat)
	o.rt.shed()
}

// CloseDB closes the object's database, if open.
func (o *object) CloseDB() { _ = o.closeDB() }

// closeDB is the one place an object's database is closed: for a failure, a hold, a claim in
// cluster mode, and eviction.
func (o *object) closeDB() error {
	if o.store == nil {
		return nil
	}
	err := o.store.Close()
	o.store = nil
	o.uncount()
	return err
}

// uncount stops counting the object's database as open; an eviction does it as the object leaves
// its namespace, before the database is closed off the caller's goroutine.
func (o *object) uncount() {
	if o.hasStore.Swap(false) {
		o.rt.counts.Closed(o.ns.stat)
	}
}

// hasInstance reports whether the object's instance is built; openStore returns its open database,
// nil if none. For the gate holder.
func (o *object) hasInstance() bool { return o.built }

func (o *object) openStore() *store { return o.store }

// lacksWebSocketHandlers reports, for a WebSocket the instance accepts, whether it has no close
// handler and no error handler (the runtime then answers a close itself, and logs errors).
func (o *object) lacksWebSocketHandlers() (noClose, noError bool) {
	_, hasClose := o.inst.(WebSocketCloseHandler)
	_, hasError := o.inst.(WebSocketErrorHandler)
	return !hasClose && o.inst != nil, !hasError && o.inst != nil
}

// unload closes the object's database and drops its instance: the next turn rebuilds both from what
// is durable.
func (o *object) unload() {
	o.CloseDB()
	o.inst, o.built = nil, false
}

// WaitClosed waits for an eviction of the same object to close its file.
func (o *object) WaitClosed() { o.ns.waitClosed(o.id) }

// Replaced forgets what the runtime knows of the local file (checked, damaged): it was replaced or
// removed.
func (o *object) Replaced() { o.rt.forgetFile(o.place.db) }

// Indexed tells this node's catalog and alarm index of the object, as its open file now is: a file
// rebuilt from the log has timers this node's index never saw.
func (o *object) Indexed() {
	if o.store == nil {
		return
	}
	var created, at sql.NullInt64
	err := o.store.QueryOwn(`SELECT (SELECT v FROM main._durable_meta WHERE k = 'created'), (SELECT min(at) FROM main._durable_timers)`,
		nil, func(r *sql.Rows) error { return r.Scan(&created, &at) })
	if err == nil {
		e := o.catalogEntry()
		e.Size = datadir.FileSize(o.place.db)
		if created.Valid {
			e.Created = created.Int64
		}
		err = o.rt.ix.Catalog(e, false)
	}
	if err == nil && at.Int64 != 0 {
		if err = o.rt.sched.EnsureIndexed(o.ns.name, o.id, o.name, at.Int64); err == nil {
			o.rt.sched.Schedule(o.ns.name, o.id, o.name, at.Int64)
		}
	}
	if err != nil {
		o.rt.log.Warn("an object rebuilt from the log could not be indexed", "event", "cluster_index_failed",
			"namespace", o.ns.name, "name", o.name, "error", err)
	}
}
