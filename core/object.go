package core

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// errEvicted tells a caller that the object it found was evicted before it could queue; the caller
// looks the object up again. It never leaves core.
var errEvicted = errors.New("core: object evicted")

// object is one live instance of a (namespace, name) address: its gate and its lifecycle
// (activation, idleness, eviction). What a turn does with it is in turn.go.
//
// The gate is a FIFO hand-off lock. A caller that finds it free takes it and runs its turn on its
// own goroutine; otherwise it queues and parks. When the holder is done, the first waiter gets the
// gate: handed to its goroutine directly, or, while callers keep queueing, its turn is run for it by
// a runner, a goroutine that holds the gate and runs the queued turns one after the other in FIFO
// order, waking each caller once its turn is over (see serve). A turn costs one mutex round trip
// when the object is idle; under contention the gate passes from turn to turn without a goroutine
// switch, and the callers' wake-ups run beside the turns instead of between them.
type object struct {
	ns    *namespace
	rt    *Runtime
	name  string
	id    string
	place placement
	state State

	mu         sync.Mutex // protects the fields down to free
	held       bool       // the gate is taken (by a turn, or by eviction)
	head, tail *waiter    // FIFO of callers waiting for the gate
	qlen       int        // waiters not cancelled
	awaiting   int        // turns inside Await (the gate is open for them)
	evicted    bool
	lastActive time.Time // for idle eviction, by the runtime's clock
	lastUse    int64     // the runtime's use sequence at the last release, for LRU order
	free       []*waiter // recycled waiters (their channels belong to this object)

	holder     atomic.Pointer[turn] // the turn holding the gate, for deadlock checks
	alarmBusy  atomic.Bool          // a run of due timers is under way (it may be inside Await)
	alarmAgain atomic.Bool          // a fire came meanwhile: the run looks again when it ends
	gone       atomic.Bool          // mirrors evicted for lock-free checks
	hasStore   atomic.Bool          // a database is open

	// Touched only by the gate holder.
	inst      any
	built     bool
	store     *store
	fresh     bool   // the runtime's tables are not set up in store yet
	batch     *batch // open group-commit batch, nil when nothing is uncommitted
	lastBatch int    // turns in the last batch committed
	alarmRun  *alarmRun
	holding   *turn // the turn of a hold (catalog.go): the gate held without an instance
	reads     atomic.Int64
	writes    atomic.Int64
	rs        *replState // cluster mode's state; nil in the single-process runtime
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
	return placement{name: name, db: filepath.Join(ns.dir, id+".sqlite"), facets: filepath.Join(ns.dir, id+".facets"),
		timers: timerHome{ns: ns, name: name, id: id}}
}

type waiter struct {
	ch        chan struct{} // receives the gate, or the end of the turn a runner ran
	t         *turn
	call      bool        // a call's turn, which a runner may run (not a reentry)
	code      turnCode    // its code
	then      func(error) // a posted turn's: nobody waits on ch; then receives the outcome
	next      *waiter
	handed    bool // the gate was passed to this waiter: sent on ch, or its turn taken by a runner
	cancelled bool // the caller gave up; skip it
	ran       bool // a runner ran the turn; err, b and exited are its outcome
	exited    bool // the turn's code called runtime.Goexit
	err       error
	b         *batch
}

func newObject(ns *namespace, name, id string, place placement) *object {
	if place.db == "" { // a top-level object
		place = topPlace(ns, name, id)
	}
	o := &object{ns: ns, rt: ns.rt, name: name, id: id, place: place, lastActive: ns.rt.coarseNow()}
	o.state.o = o
	o.state.storage.o = o
	if ns.rt.repl != nil {
		o.rs = newReplState(ns, name)
	}
	return o
}

// acquire takes the gate for t, queueing in FIFO order if it is held. A reentry (a turn coming back
// from Await, or a run of timers) is never refused and does not watch ctx: the turn's code must not
// go on without the gate. A call's turn (with code) may be run by a runner instead of being handed
// the gate: acquire then returns the waiter, with the turn's outcome.
func (o *object) acquire(t *turn, code turnCode, reentry bool) (*waiter, error) {
	o.mu.Lock()
	if o.evicted {
		o.mu.Unlock()
		return nil, errEvicted
	}
	if !o.held && o.head == nil {
		o.held = true
		o.holder.Store(t)
		o.mu.Unlock()
		return nil, nil
	}
	if !reentry {
		err := ErrOverloaded
		if o.qlen < o.rt.opts.MaxQueue {
			err = o.checkDeadlock(t)
		}
		if err != nil {
			o.mu.Unlock()
			return nil, err
		}
	}
	w := o.newWaiter()
	w.t, w.code, w.call = t, code, !reentry && code != nil
	o.enqueue(w) // t waiting before the gate can be handed to it, which clears it
	o.mu.Unlock()
	defer t.waiting.Store(nil)

	done := t.Context.Done()
	if reentry || done == nil {
		<-w.ch
		return o.got(w), nil
	}
	select {
	case <-w.ch:
		return o.got(w), nil
	case <-done:
		o.mu.Lock()
		if w.handed { // the gate reached us as we gave up
			o.mu.Unlock()
			<-w.ch
			if w.ran { // the turn ran: its outcome is the call's
				return w, nil
			}
			o.recycle(w)
			o.release() // pass it on
			return nil, t.Context.Err()
		}
		w.cancelled = true
		o.qlen--
		o.mu.Unlock()
		return nil, t.Context.Err()
	}
}

// got is what acquire returns once w was woken: w if a runner ran its turn, else nil (w holds the
// gate).
func (o *object) got(w *waiter) *waiter {
	if w.ran {
		return w
	}
	o.recycle(w)
	return nil
}

func (o *object) recycle(w *waiter) {
	*w = waiter{ch: w.ch}
	o.mu.Lock()
	if len(o.free) < 64 {
		o.free = append(o.free, w)
	}
	o.mu.Unlock()
}

// release hands the gate to the next waiter, or frees it. If the next waiter's turn may be run for
// it, a runner is started to run it (and the turns queued after it).
func (o *object) release() {
	if w := o.pass(true); w != nil {
		o.rt.goWork(func() { o.serve(w) })
	}
}

// pass gives the gate to the first waiter, or frees it. With combine, a waiter whose turn a runner
// may run is not woken but returned, holding the gate, for the calling runner (or a new one) to run.
// That is only done while no turn's code runs anywhere (running is 0), so that the caller's
// goroutine holds no turn: the deadlock check, which reads the stack of the goroutine that waits
// (hiddenCallers), sees on the runner's stack everything it would have seen on the caller's. The
// gate is never freed with a batch open: if nobody is left to join it (a waiter gave up), pass
// commits it first. A posted turn, which no goroutine waits for, is always returned.
func (o *object) pass(combine bool) *waiter {
	for {
		o.mu.Lock()
		for o.head != nil {
			w := o.head
			o.head = w.next
			if o.head == nil {
				o.tail = nil
			}
			w.next = nil
			if w.cancelled {
				continue
			}
			o.qlen--
			w.handed = true
			w.t.waiting.Store(nil)
			o.holder.Store(w.t)
			o.mu.Unlock()
			if w.then != nil || combine && w.call && o.rt.running.Load() == 0 {
				return w
			}
			w.ch <- struct{}{}
			return nil
		}
		if o.batch != nil {
			o.mu.Unlock()
			_ = o.commit() // the turns waiting for it receive the error
			continue
		}
		o.held = false
		o.holder.Store(nil)
		o.lastActive = o.rt.coarseNow()
		o.lastUse = o.rt.uses.Add(1)
		o.mu.Unlock()
		return nil
	}
}

// serve is a runner: it runs w's turn for its caller, then the next queued turn, and so on, holding
// the gate throughout, until the queue is empty (the gate is freed) or the next waiter must run on
// its own goroutine (it is handed the gate). Each caller is woken once its turn has ended; it waits
// for the turn's commit itself. The turn's context is the caller's turn, as on the caller's
// goroutine; a panic is recovered as it is there. If the turn's code calls runtime.Goexit, the
// runner ends: the gate goes to the next waiter's goroutine, and the caller's goroutine exits in
// turn (see runTurn).
func (o *object) serve(w *waiter) {
	for w != nil {
		w = o.runFor(w)
	}
}

// runFor runs one turn for its caller and returns the next one to run, if any.
func (o *object) runFor(w *waiter) (next *waiter) {
	t := w.t
	o.rt.tel.held(t, nil)
	exited := true
	defer func() {
		if exited {
			w.b, w.ran, w.exited = t.finish(), true, true
			w.err = &RemoteError{Err: errGoexit}
			then := w.then
			if next := o.pass(false); next != nil {
				o.rt.goWork(func() { o.serve(next) })
			}
			if then != nil {
				o.recycle(w)
				then(w.err)
				return
			}
			w.ch <- struct{}{}
		}
	}()
	var b *batch
	var err error
	if w.then == nil {
		err = t.Context.Err()
	}
	if err == nil {
		err = o.runHeld(t, w.code, false, nil)
		exited = false
		b = t.finish()
	} else { // the caller gave up before its turn started: it does not run
		exited = false
		t.finish()
	}
	if then := w.then; then != nil {
		o.recycle(w)
		if b != nil && err == nil && !b.over() {
			tell := then
			b.effects = append(b.effects, effect{fn: func(bool) { tell(b.err) }})
			then = nil
		} else if err == nil && b != nil {
			err = b.err
		}
		if then != nil { // before the gate passes: a failure closes the connection for the next turns
			then(err)
		}
		return o.pass(true)
	}
	w.err, w.b, w.ran = err, b, true
	next = o.pass(true)
	w.ch <- struct{}{} // w is the caller's from here
	return next
}

// post queues t, a call's turn, and returns without waiting for it: a runner runs it (a new one if
// the gate is free), and then receives its outcome once its writes are durable, or its error if it
// failed. The turns of one poster run in the order posted. post fails as acquire does (errEvicted,
// ErrOverloaded); the poster must not be a turn's goroutine waiting for it.
func (o *object) post(t *turn, code turnCode, then func(error)) error {
	o.mu.Lock()
	if o.evicted {
		o.mu.Unlock()
		return errEvicted
	}
	free := !o.held && o.head == nil
	if !free && o.qlen >= o.rt.opts.MaxQueue {
		o.mu.Unlock()
		return ErrOverloaded
	}
	w := o.newWaiter()
	w.t, w.code, w.call, w.then = t, code, true, then
	if free {
		o.held, w.handed = true, true
		o.holder.Store(t)
		o.mu.Unlock()
		o.rt.goWork(func() { o.serve(w) })
		return nil
	}
	o.enqueue(w)
	o.mu.Unlock()
	return nil
}

// newWaiter takes a waiter from the free list, or makes one. o.mu is held.
func (o *object) newWaiter() *waiter {
	if n := len(o.free); n > 0 {
		w := o.free[n-1]
		o.free = o.free[:n-1]
		return w
	}
	return &waiter{ch: make(chan struct{}, 1)}
}

// enqueue puts w at the back of the gate's queue and marks its turn as waiting on o. o.mu is held.
func (o *object) enqueue(w *waiter) {
	if o.tail == nil {
		o.head = w
	} else {
		o.tail.next = w
	}
	o.tail = w
	o.qlen++
	w.t.waiting.Store(o)
}

// queued reports whether callers are waiting for the gate.
func (o *object) queued() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.qlen > 0
}

// idleSince reports how long the object has had nothing to do, or -1 if it is busy, and its use
// sequence for LRU order.
func (o *object) idleSince(now time.Time) (time.Duration, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held || o.qlen > 0 || o.awaiting > 0 {
		return -1, -1
	}
	return now.Sub(o.lastActive), o.lastUse
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

// detach is the first half of an eviction: the object leaves its namespace (an activation of the
// same name now waits for the close) and stops counting as open.
func (o *object) detach() chan struct{} {
	ch := o.ns.remove(o)
	if o.store != nil {
		o.hasStore.Store(false)
		o.rt.stats.openDBs.Add(-1)
	}
	o.rt.stats.evictions.Add(1)
	return ch
}

// closeRemoved is the second half: the database is closed (which checkpoints it only past
// sqlstore.WALTrim of log, or with synchronous=NORMAL: see sqlstore.Open).
func (o *object) closeRemoved(ch chan struct{}) (err error) {
	defer o.ns.closed(o.id, ch)
	if o.inst, o.built = nil, false; o.store != nil {
		err, o.store = o.store.Close(), nil
		o.touchCatalog()
	}
	if o.rs != nil && o.rs.lease != nil { // evicted: the lease goes back, another node may take it at once
		err = errors.Join(err, o.rt.repl.release(o.rs.lease))
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
