package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// errEvicted tells a caller that the object it found was evicted before it
// could queue; the caller looks the object up again. It never leaves core.
var errEvicted = errors.New("core: object evicted")

// object is one live instance of a (namespace, name) address: its gate, its
// queue, its in-memory instance and its open database.
//
// The gate is a FIFO hand-off lock. A caller that finds it free takes it and
// runs its turn on its own goroutine; otherwise it queues and parks until
// the holder hands the gate to it directly. There is no mailbox goroutine:
// a turn costs one mutex round trip when the object is idle and one
// park/unpark when it is busy.
type object struct {
	ns    *namespace
	rt    *Runtime
	name  string
	id    string
	state State
	facet *facetInfo // set for a facet

	mu         sync.Mutex // protects the fields down to free
	held       bool       // the gate is taken (by a turn, or by eviction)
	head, tail *waiter    // FIFO of callers waiting for the gate
	qlen       int        // waiters not cancelled
	awaiting   int        // turns inside Await (the gate is open for them)
	evicted    bool
	lastActive time.Time // coarse, for idle eviction
	lastUse    int64     // the runtime's use sequence at the last release, for LRU order
	free       []*waiter // recycled waiters (their channels belong to this object)

	gone     atomic.Bool // mirrors evicted for lock-free checks
	hasStore atomic.Bool // a database is open

	// Touched only by the gate holder.
	inst      any
	built     bool
	cur       *turnCtx // the turn running now, nil between turns
	store     *store
	batch     *batch // open group-commit batch, nil when nothing is uncommitted
	spOpen    bool   // the current turn segment has a savepoint (or owns the transaction)
	spIsTx    bool   // the segment opened the batch: its "savepoint" is the transaction itself
	lastBatch int    // turns in the last batch committed
	txDepth   int    // nested Storage.Transaction depth
	reads     atomic.Int64
	writes    atomic.Int64

	segTimers   bool      // the current segment changed a timer
	batchTimers bool      // the open batch changed a timer
	alarmRun    *alarmRun // a run of due timers in progress

	sends []wsOut // WebSocket output of the current segment (websocket.go)
}

type waiter struct {
	ch        chan struct{} // receives the gate
	next      *waiter
	handed    bool // the gate was sent on ch
	cancelled bool // the caller gave up; skip it
}

// batch is a group commit: the turns whose writes share one transaction.
type batch struct {
	done     chan struct{} // closed when the commit is over
	err      error         // the commit's error, set before done is closed
	turns    int
	dirty    bool // something was written
	initMeta bool // the batch created the runtime's tables

	sends []wsOut // WebSocket output released when the batch commits (websocket.go)
}

func newObject(ns *namespace, name, id string) *object {
	o := &object{ns: ns, rt: ns.rt, name: name, id: id, lastActive: time.Now()}
	o.state.o = o
	o.state.storage.o = o
	return o
}

func (o *object) isEvicted() bool { return o.gone.Load() }

// acquire takes the gate, queueing in FIFO order if it is held. A reentry
// (a turn coming back from Await) is never refused and does not watch ctx:
// the turn's code must not go on without the gate.
func (o *object) acquire(ctx context.Context, reentry bool) error {
	o.mu.Lock()
	if o.evicted {
		o.mu.Unlock()
		return errEvicted
	}
	if !o.held && o.head == nil {
		o.held = true
		o.mu.Unlock()
		return nil
	}
	if !reentry && o.qlen >= o.rt.opts.MaxQueue {
		o.mu.Unlock()
		return ErrOverloaded
	}
	var w *waiter
	if n := len(o.free); n > 0 {
		w, o.free = o.free[n-1], o.free[:n-1]
	} else {
		w = &waiter{ch: make(chan struct{}, 1)}
	}
	if o.tail == nil {
		o.head = w
	} else {
		o.tail.next = w
	}
	o.tail = w
	o.qlen++
	o.mu.Unlock()

	done := ctx.Done()
	if reentry || done == nil {
		<-w.ch
		o.recycle(w)
		return nil
	}
	select {
	case <-w.ch:
		o.recycle(w)
		return nil
	case <-done:
		o.mu.Lock()
		if w.handed { // the gate reached us as we gave up: pass it on
			o.mu.Unlock()
			<-w.ch
			o.recycle(w)
			o.release()
			return ctx.Err()
		}
		w.cancelled = true
		o.qlen--
		o.mu.Unlock()
		return ctx.Err()
	}
}

func (o *object) recycle(w *waiter) {
	w.handed, w.cancelled, w.next = false, false, nil
	o.mu.Lock()
	if len(o.free) < 64 {
		o.free = append(o.free, w)
	}
	o.mu.Unlock()
}

// release hands the gate to the next waiter, or frees it. The gate is never
// freed with a batch open: if nobody is left to join it (a waiter gave up),
// release commits it first.
func (o *object) release() {
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
			o.mu.Unlock()
			w.ch <- struct{}{}
			return
		}
		if o.batch != nil {
			o.mu.Unlock()
			_ = o.commit() // the turns waiting for it receive the error
			continue
		}
		o.held = false
		o.lastActive = o.rt.coarseNow()
		o.lastUse = o.rt.uses.Add(1)
		o.mu.Unlock()
		return
	}
}

// queued reports whether callers are waiting for the gate.
func (o *object) queued() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.qlen > 0
}

// idleSince reports how long the object has had nothing to do.
func (o *object) idleSince(now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held || o.qlen > 0 || o.awaiting > 0 {
		return 0
	}
	return now.Sub(o.lastActive)
}

// recency returns the use sequence of the object's last release, or -1 if
// it is busy.
func (o *object) recency() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held || o.qlen > 0 || o.awaiting > 0 {
		return -1
	}
	return o.lastUse
}

// tryEvict takes the gate for good if the object is idle. The caller must
// then call closeStore.
func (o *object) tryEvict(force bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.evicted || o.held || o.head != nil || o.awaiting > 0 {
		return false
	}
	o.evicted, o.held = true, true
	o.gone.Store(true)
	return true
}

// closeStore finishes an eviction: it forgets the instance and closes the
// database. The object is unreachable by then.
func (o *object) closeStore() error { return o.closeRemoved(o.detach()) }

// detach is the first half of closeStore: the object leaves its namespace
// (an activation of the same name now waits for the close) and stops
// counting as open.
func (o *object) detach() chan struct{} {
	ch := o.ns.remove(o)
	if o.store != nil {
		o.hasStore.Store(false)
		o.rt.stats.openDBs.Add(-1)
	}
	o.rt.stats.evictions.Add(1)
	return ch
}

// closeRemoved is the second half: the database is closed (a checkpoint).
func (o *object) closeRemoved(ch chan struct{}) error {
	defer o.ns.closed(o.id, ch)
	var err error
	if o.batch != nil { // not expected: the gate is never freed with a batch open
		err = o.commit()
	}
	o.inst, o.built = nil, false
	if o.store != nil {
		err = errors.Join(err, o.store.close())
		o.store = nil
	}
	return err
}

// run runs fn as one turn: it waits for the gate, constructs the instance if
// needed, runs fn inside a savepoint, and returns once the turn's writes
// (and any writes it read) are durable.
func (o *object) run(ctx context.Context, fn func(context.Context, any) error) error {
	if err := o.acquire(ctx, false); err != nil {
		return err
	}
	if o.rt.isClosed.Load() {
		_, _ = o.leave(nil)
		return ErrClosed
	}
	if !o.built {
		if err := o.construct(ctx); err != nil {
			wait, cerr := o.leave(nil)
			return firstErr(err, wait.wait(), cerr)
		}
	}
	err := o.invoke(ctx, fn)
	wait, cerr := o.leave(nil)
	return firstErr(err, wait.wait(), cerr)
}

// construct runs the constructor as a turn.
func (o *object) construct(ctx context.Context) error {
	o.rt.stats.constructs.Add(1)
	var inst any
	err := o.invoke(ctx, func(ctx context.Context, _ any) error {
		var err error
		inst, err = o.ns.ctor(ctx, &o.state)
		return err
	})
	if err != nil {
		return fmt.Errorf("constructor: %w", err)
	}
	o.inst, o.built = inst, true
	return nil
}

// invoke runs one turn segment of user code with the gate held. A returned
// error or a panic rolls the segment back and comes out as a *RemoteError.
func (o *object) invoke(ctx context.Context, fn func(context.Context, any) error) (err error) {
	tc := &turnCtx{Context: ctx, o: o}
	o.cur = tc
	o.rt.stats.turns.Add(1)
	defer func() {
		if p := recover(); p != nil {
			err = &RemoteError{Err: &PanicError{Value: p, Stack: debug.Stack()}}
		}
		o.cur = nil
		if serr := o.endSegment(err != nil); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := fn(tc, o.inst); err != nil {
		return &RemoteError{Err: err}
	}
	return nil
}

// endSegment closes the current segment's savepoint: released into the
// batch on success, rolled back on failure.
func (o *object) endSegment(failed bool) error {
	o.settleSends(failed)
	o.txDepth = 0
	if o.segTimers {
		o.segTimers = false
		if !failed {
			o.batchTimers = true
		}
	}
	if !o.spOpen {
		return nil
	}
	o.spOpen = false
	b := o.batch
	b.turns++
	if o.spIsTx {
		// The segment opened the batch: nothing else is in it, so there is
		// no savepoint to pay for; a failure rolls back the transaction.
		o.spIsTx = false
		if !failed {
			return nil
		}
		o.batch = nil
		o.batchTimers = false
		if b.initMeta {
			o.store.fresh = true
		}
		err := o.store.execInternal("ROLLBACK")
		close(b.done)
		if err != nil {
			return o.poison(err)
		}
		return nil
	}
	var err error
	if failed {
		err = o.store.execInternal("ROLLBACK TO turn")
	}
	if err == nil {
		err = o.store.execInternal("RELEASE turn")
	}
	if err != nil {
		return o.poison(err)
	}
	return nil
}

// leave ends a holder's use of the gate. The open batch is committed now if
// no other turn is queued to join it (or it is full); otherwise the next
// turn joins it and this one waits for that commit. It returns the batch to
// wait for, or the error of the commit it made itself.
func (o *object) leave(_ *turnCtx) (*batch, error) {
	b := o.batch
	var err error
	if b != nil {
		queued := o.queued()
		if !queued && b.turns == 1 && o.lastBatch > 1 {
			// The callers of the last batch were all released at once by
			// its commit; the first one back should not commit alone while
			// the others are on their way. Give them a moment to queue.
			runtime.Gosched()
			queued = o.queued()
		}
		if b.turns >= o.rt.opts.MaxBatch || !queued {
			o.lastBatch = b.turns
			err = o.commit()
			b = nil
		}
	}
	o.release()
	return b, err
}

// wait blocks until the batch is committed and returns its error.
func (b *batch) wait() error {
	if b == nil {
		return nil
	}
	<-b.done
	return b.err
}

// commit makes the open batch durable and releases every turn waiting for
// it. If the batch changed the alarm, the runtime's index learns of it
// before the commit, and the scheduler after it.
func (o *object) commit() error {
	b := o.batch
	defer b.settleSends()
	var alarm *alarmChange
	var err error
	if o.batchTimers {
		var next int64
		var ok bool
		if next, ok, err = o.nextTimerInBatch(); err == nil {
			alarm = &alarmChange{at: next, del: !ok}
			if ok {
				err = o.rt.sched.ensureIndexed(o.ns.name, o.id, o.name, next)
			}
		}
	}
	if err == nil {
		err = o.store.execInternal("COMMIT")
	}
	o.batch, o.batchTimers = nil, false
	if err != nil {
		b.err = o.poison(err)
		close(b.done)
		return b.err
	}
	if b.dirty {
		o.rt.stats.commits.Add(1)
	}
	if alarm != nil {
		o.rt.sched.committed(o.ns.name, o.id, o.name, alarm)
	}
	close(b.done)
	return nil
}

// poison handles a failure of the runtime's own transaction statements: the
// connection's state is unknown, so the batch is abandoned, the database
// closed and the instance dropped; the next turn rebuilds from what is
// durable.
func (o *object) poison(cause error) error {
	err := fmt.Errorf("%w: %v", ErrCommitFailed, cause)
	if b := o.batch; b != nil {
		o.batch = nil
		defer b.settleSends()
		b.err = err
		close(b.done)
	}
	o.spOpen, o.spIsTx, o.txDepth = false, false, 0
	o.segTimers, o.batchTimers = false, false
	if o.store != nil {
		o.store.close()
		o.store = nil
		o.hasStore.Store(false)
		o.rt.stats.openDBs.Add(-1)
	}
	o.inst, o.built = nil, false
	return err
}

// await runs fn with the gate open: the turn so far is committed durably,
// other turns may run while fn runs, and the turn re-enters at the back of
// the queue when fn returns.
func (o *object) await(ctx context.Context, fn func(context.Context) error) (err error) {
	tc, _ := ctx.Value(turnKey{}).(*turnCtx)
	if tc == nil || tc.o != o || o.cur != tc {
		return ErrNotInTurn
	}
	if err := o.endSegment(false); err != nil {
		return err
	}
	o.cur = nil
	var cerr error
	if o.batch != nil {
		cerr = o.commit()
	}
	o.mu.Lock()
	o.awaiting++
	o.mu.Unlock()
	o.release()
	defer func() {
		_ = o.acquire(ctx, true)
		o.mu.Lock()
		o.awaiting--
		o.mu.Unlock()
		o.cur = tc
	}()
	if cerr != nil {
		return cerr
	}
	return fn(ctx)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// turnKey marks a turn's context.
type turnKey struct{}

// turnCtx is the context a turn's code receives. It names the object whose
// turn it is, so that Await and nested calls can find the gate to open.
type turnCtx struct {
	context.Context
	o *object
}

func (c *turnCtx) Value(key any) any {
	if key == (turnKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// inTurn checks that ctx marks o's running turn.
func (o *object) inTurn(ctx context.Context) error {
	if turnOf(ctx) != o {
		return ErrNotInTurn
	}
	return nil
}

// turnOf returns the object whose running turn ctx marks, or nil.
func turnOf(ctx context.Context) *object {
	tc, _ := ctx.Value(turnKey{}).(*turnCtx)
	if tc == nil || tc.o.cur != tc {
		return nil
	}
	return tc.o
}
