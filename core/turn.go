package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/durable-go/durable/core/internal/wsconn"
)

// A turn is one call's (or one event's) run on an object, and this file is its whole life: where it
// begins (run), how its segments run (invoke), how its writes commit (commit) and where its output
// is released (release).
//
// A turn runs in segments: the code between two waits for something that is not the object's own
// storage. Each segment holds the gate. Its writes run in a savepoint of the open group-commit
// batch (or in the batch's transaction itself when it opened it); it owns the Rows it opened, which
// are closed when it ends, and it collects effects: output held until the batch commits (WebSocket
// sends, closes and accepts, HTTP responses, facet removals), dropped if the segment or the commit
// fails. The turn is also the context its code receives: every in-turn operation finds its turn
// through that context, never through the object.
type turn struct {
	context.Context
	o        *object
	flags    atomic.Uint32          // turnLive, turnHasSeg, turnTied
	*segment                        // made when the turn first uses storage, output or Done (see seg)
	waiting  atomic.Pointer[object] // the gate this turn is queued for
}

// A turn's flags.
const (
	turnLive   = 1 << iota // its segment is running
	turnHasSeg             // segment is made
	turnTied               // Done is tied to the runtime's base context
)

func (t *turn) is(flag uint32) bool { return t.flags.Load()&flag != 0 }

// turnCode is the code a call runs in its turn.
type turnCode interface {
	run(ctx context.Context, inst any) error
}

// codeFunc is a turnCode made of a func.
type codeFunc func(ctx context.Context, inst any) error

func (f codeFunc) run(ctx context.Context, inst any) error { return f(ctx, inst) }

// callerOf is the turn that makes a call with ctx, if any.
func callerOf(ctx context.Context) *turn {
	t, _ := ctx.Value(callerKey{}).(*turn)
	return t
}

// chain reports whether u is t or one of the turns t is run for.
func (t *turn) chain(u *turn) bool {
	for a := t; a != nil; a = a.parent() {
		if a == u {
			return true
		}
	}
	return false
}

// parent is the turn whose context made t's call: it waits in Await meanwhile.
func (t *turn) parent() *turn { return callerOf(t.Context) }

// segment is what a turn's segment holds, used by the gate holder (and effects, under its mu, by
// Send).
type segment struct {
	mu      sync.Mutex // guards effects and the making of done (Send may come from any goroutine)
	sp      spState
	depth   int // nested Storage.Transaction depth
	rows    []*Rows
	timers  bool     // the segment changed a timer
	effects []effect // the segment's output
	done    context.Context
	stop    func() // unties done from the runtime's base context
}

// seg returns the turn's segment state, making it if needed. It is made once and never changed:
// the first maker installs it with a compare-and-swap (a Send may race the gate holder), and the
// turnHasSeg flag, set after it, lets later readers skip the atomics. The turn holds no lock of its
// own, so that a call's turn fits its allocation's size class with its code and result.
func (t *turn) seg() *segment {
	if t.is(turnHasSeg) {
		return t.segment
	}
	p := (*unsafe.Pointer)(unsafe.Pointer(&t.segment))
	if !atomic.CompareAndSwapPointer(p, nil, unsafe.Pointer(new(segment))) {
		return (*segment)(atomic.LoadPointer(p))
	}
	t.flags.Or(turnHasSeg)
	return t.segment
}

type spState uint8

const (
	spNone spState = iota
	spSavepoint
	spTx // the segment opened the batch: its transaction is the savepoint
)

// turnKey finds the turn whose segment may act (storage, output); callerKey finds the turn that
// makes a call, even from inside Await.
type turnKey struct{}
type callerKey struct{}

// Value makes the turn findable from its context.
func (t *turn) Value(key any) any {
	if key == (turnKey{}) || key == (callerKey{}) {
		return t
	}
	return t.Context.Value(key)
}

// Done is the caller's Done, ended also by Runtime.Shutdown (the tie to the runtime's base context
// is made when the code first asks).
func (t *turn) Done() <-chan struct{} { return t.merged().Done() }
func (t *turn) Err() error { // polling Err does not tie
	if t.is(turnTied) {
		return t.done.Err()
	}
	return cmp.Or(t.Context.Err(), t.o.rt.base.Err())
}

func (t *turn) merged() context.Context {
	s := t.seg()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		ctx, cancel := context.WithCancel(t.Context)
		stop := context.AfterFunc(t.o.rt.base, cancel)
		s.done, s.stop = ctx, func() { stop(); cancel() }
		t.flags.Or(turnTied)
	}
	return s.done
}

// turnOf returns the turn ctx marks if its segment is running, or nil.
func turnOf(ctx context.Context) *turn {
	t, _ := ctx.Value(turnKey{}).(*turn)
	if t == nil || !t.is(turnLive) {
		return nil
	}
	return t
}

// inTurn checks that ctx marks a running turn of o.
func (o *object) inTurn(ctx context.Context) (*turn, error) {
	t := turnOf(ctx)
	if t == nil || t.o != o {
		return nil, ErrNotInTurn
	}
	return t, nil
}

// effect is one piece of a turn's output, held until the batch holding the turn's writes is
// durable. Sends, closes and accepts are values (a broadcast holds a thousand of them); anything
// else is a func told whether the writes committed.
type effect struct {
	kind effectKind
	ws   *WebSocket
	msg  Message
	end  *wsconn.End
	fn   func(committed bool)
}

type effectKind uint8

const (
	effFunc effectKind = iota
	effSend
	effClose
	effAccept // undone (closed with 1011) if the turn fails
)

// emit adds an effect to the segment's output.
func (t *turn) emit(e effect) {
	s := t.seg()
	s.mu.Lock()
	if s.effects == nil {
		if p, ok := effectPool.Get().(*[]effect); ok {
			s.effects = *p
		}
	}
	s.effects = append(s.effects, e)
	s.mu.Unlock()
}

// Effect lists are pooled: a broadcast to a thousand members needs one.
var effectPool sync.Pool

// release carries out effects once their writes are durable (committed) or drops them (the segment
// or the commit failed).
func release(effects []effect, committed bool) {
	defer recycle(effects)
	for i := range effects {
		switch e := &effects[i]; {
		case e.kind == effFunc:
			e.fn(committed)
		case !committed:
			if e.kind == effAccept {
				e.ws.c.StartClose(&wsconn.End{Code: CloseInternalError, Reason: "accept rolled back"})
			}
		case e.kind == effSend:
			if e.ws.c.Enqueue(wsconn.Frame(e.msg)) {
				e.ws.rt.tel.sent(e.ws.ns)
			}
		case e.kind == effClose:
			e.ws.c.StartClose(e.end)
		}
	}
}

func recycle(effects []effect) {
	if effects != nil && cap(effects) <= 1<<16 {
		clear(effects)
		effects = effects[:0]
		effectPool.Put(&effects)
	}
}

// batch is a group commit: the segments whose writes share one transaction.
type batch struct {
	done     chan struct{} // closed when the commit is over
	err      error         // the commit's error, set before done is closed
	turns    int
	dirty    bool // something was written
	initMeta bool // the batch created the runtime's tables
	timers   bool // a segment in it changed a timer
	effects  []effect
}

// over reports whether the batch's commit is over (read by the gate holder).
func (b *batch) over() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *batch) wait() error {
	if b == nil {
		return nil
	}
	<-b.done
	return b.err
}

// run runs fn as one turn: it waits for the gate, builds the instance if needed, runs fn, and
// returns once the turn's writes (and any writes it read) are durable.
func (o *object) run(ctx context.Context, fn func(context.Context, any) error) error {
	return o.runTurn(&turn{Context: ctx, o: o}, codeFunc(fn), false, nil)
}

// runTurn runs t as a turn holding the gate, once the instance is built: body, or else t's code. A
// reentry is not refused for a full queue (an alarm run). A call's turn may be run by a runner (see
// serve): the caller then waits for the turn's commit here, and if the turn's code called
// runtime.Goexit, its goroutine exits here, as it would have had the turn run on it.
func (o *object) runTurn(t *turn, code turnCode, reentry bool, body func(*turn) error) (err error) {
	tel := o.rt.tel
	tel.begin(t)
	w, err := o.acquire(t, code, reentry)
	if err != nil {
		tel.held(t, err)
		return o.refused(t, err)
	}
	if w != nil { // a runner ran the turn (and measured its wait for the gate)
		err, b, exited := w.err, w.b, w.exited
		o.recycle(w)
		commit := tel.commitWait(t)
		if werr := b.wait(); err == nil {
			err = werr
		}
		tel.done(t, commit, err)
		if exited {
			runtime.Goexit()
		}
		return err
	}
	tel.held(t, nil)
	defer func() {
		commit := tel.commitWait(t)
		if werr := t.end(); err == nil {
			err = werr
		}
		tel.done(t, commit, err)
	}()
	return o.runHeld(t, code, reentry, body)
}

// runHeld runs the turn t, which holds the gate: body, or else code. alarm tells a run of timers,
// whose failing constructor retries or dead-letters the due timers.
func (o *object) runHeld(t *turn, code turnCode, alarm bool, body func(*turn) error) error {
	if o.rt.isClosed.Load() {
		return ErrClosed
	}
	if o.rs != nil {
		if err := o.claim(); err != nil {
			return err
		}
	}
	if !o.built {
		if err := o.construct(t); err != nil {
			return o.constructFailed(t, alarm, err)
		}
	}
	if body != nil {
		return body(t)
	}
	return o.invoke(t, code.run)
}

// end finishes a turn that holds the gate and passes the gate on; the turn returns once its writes
// are durable. It runs even when the turn's goroutine exits.
func (t *turn) end() error {
	b := t.finish()
	t.o.release()
	return b.wait()
}

// finish ends a turn's use of the gate, which it still holds: the batch is committed now if no
// other turn is queued to join it; finish returns the batch that holds the turn's writes.
func (t *turn) finish() *batch {
	if t.is(turnTied) { // stop was set before tied
		t.stop()
	}
	return t.o.leave()
}

// construct runs the constructor as the object's first segment.
func (o *object) construct(t *turn) error {
	o.rt.stats.constructs.Add(1)
	var inst any
	err := o.invoke(t, func(ctx context.Context, _ any) error {
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

var errGoexit = errors.New("core: the turn's goroutine exited (runtime.Goexit) before the turn ended")

// invoke runs one segment of user code with the gate held. A returned error rolls the segment back
// and comes out as a *RemoteError; the instance is kept, and so is what the code changed in memory.
// A panic or a runtime.Goexit rolls it back too and also drops the instance: the constructor runs
// again for the next event, from what is durable.
func (o *object) invoke(t *turn, fn func(context.Context, any) error) (err error) {
	t.flags.Or(turnLive)
	o.rt.stats.turns.Add(1)
	o.rt.running.Add(1)
	o.rt.tel.segmentStart(t)
	normal := false
	defer func() {
		o.rt.running.Add(-1)
		if !normal {
			if p := recover(); p != nil {
				err = &RemoteError{Err: &PanicError{Value: p, Stack: debug.Stack()}}
			} else {
				err = &RemoteError{Err: errGoexit}
			}
			o.inst, o.built = nil, false
		}
		if o.state.reset { // a BlockConcurrencyWhile failed: the turn fails, the instance goes
			o.state.reset = false
			o.inst, o.built = nil, false
			if err == nil {
				err = &RemoteError{Err: ErrObjectReset}
			}
		}
		if serr := t.endSegment(err != nil); serr != nil && err == nil {
			err = serr
		}
		o.rt.tel.segmentEnd(t, err)
	}()
	if err = fn(t, o.inst); err != nil {
		err = &RemoteError{Err: err}
	}
	normal = true
	return err
}

// db returns the open database with the segment's savepoint in place, opening the database and the
// group-commit batch as needed.
func (t *turn) db() (*store, error) {
	o := t.o
	t.seg()
	if o.store == nil {
		if o.rs != nil {
			if err := o.rs.servable(); err != nil {
				return nil, err
			}
		}
		o.ns.waitClosed(o.id)
		st, fresh, err := o.openDB()
		if err != nil {
			return nil, fmt.Errorf("core: open database: %w", err)
		}
		if o.rs != nil {
			if err := o.rs.opened(o.place.db, fresh); err != nil {
				st.Close()
				return nil, fmt.Errorf("core: open database: %w", err)
			}
		}
		o.store, o.fresh = st, fresh
		o.hasStore.Store(true)
		o.rt.stats.openDBs.Add(1)
		o.rt.shed()
	}
	st := o.store
	if o.batch == nil {
		if err := st.Control("BEGIN"); err != nil {
			return nil, o.poison(err)
		}
		o.batch = &batch{done: make(chan struct{})}
		t.sp = spTx
		if o.fresh {
			err := st.ExecOwn(runtimeSchema)
			if err == nil {
				err = o.initMeta(st)
			}
			if err != nil {
				return nil, o.poison(err)
			}
			o.fresh = false
			o.batch.dirty, o.batch.initMeta = true, true
		}
	}
	if t.sp == spNone {
		if err := st.Control("SAVEPOINT turn"); err != nil {
			return nil, o.poison(err)
		}
		t.sp = spSavepoint
	}
	return st, nil
}

// write is db for statements that change something.
func (t *turn) write() (*store, error) {
	st, err := t.db()
	if err == nil {
		t.o.batch.dirty = true
	}
	return st, err
}

// endSegment closes the segment: its Rows are closed, its savepoint is released into the batch (or
// rolled back), and its effects join the batch (or are dropped; with nothing uncommitted they are
// released now).
func (t *turn) endSegment(failed bool) error {
	o := t.o
	t.flags.And(^uint32(turnLive))
	if !t.is(turnHasSeg) { // no storage, no output
		return nil
	}
	s := t.seg()
	s.mu.Lock()
	effects := s.effects
	s.effects = nil
	s.mu.Unlock()
	for _, r := range t.rows {
		r.rows.Close()
	}
	clear(t.rows)
	t.rows, t.depth = t.rows[:0], 0
	timers := t.timers && !failed
	t.timers = false

	var err error
	sp := t.sp
	switch {
	case sp == spNone:
	case failed && sp == spTx:
		// The segment opened the batch: nothing else is in it.
		b := o.batch
		o.batch = nil
		if b.initMeta {
			o.fresh = true
		}
		err = o.store.Control("ROLLBACK")
		close(b.done)
	case failed:
		err = o.store.Control("ROLLBACK TO turn")
		if err == nil {
			err = o.store.Control("RELEASE turn")
		}
	case sp == spSavepoint:
		err = o.store.Control("RELEASE turn")
	}
	t.sp = spNone
	if err != nil {
		err = o.poison(err)
		failed = true
	}
	if b := o.batch; b != nil && !failed {
		if sp != spNone {
			b.turns++
		}
		b.timers = b.timers || timers
		if b.effects == nil {
			b.effects = effects
		} else if effects != nil {
			b.effects = append(b.effects, effects...)
			recycle(effects)
		}
		return nil
	}
	if effects != nil {
		release(effects, !failed)
	}
	return err
}

// leave ends a holder's use of the gate, before it passes the gate on. The open batch is committed
// now if no other turn is queued to join it (or it is full); otherwise the next turn joins it and
// this one waits for that commit. leave returns the batch.
func (o *object) leave() *batch {
	b := o.batch
	if b != nil {
		queued := o.queued()
		if !queued && b.turns == 1 && o.lastBatch > 1 {
			// The callers of the last batch were all released at once by its commit; the first one
			// back should not commit alone while the others are on their way. Give them a moment to
			// queue.
			runtime.Gosched()
			queued = o.queued()
		}
		if b.turns >= o.rt.opts.MaxBatch || !queued {
			o.lastBatch = b.turns
			o.commit()
		}
	}
	return b
}

// commit makes the open batch durable, then releases its output and every turn waiting for it. If
// the batch changed a timer, the runtime's alarm index learns the earliest one before the commit
// (so a crash can leave an early index entry, never a missing one) and the scheduler after it.
func (o *object) commit() error {
	b := o.batch
	start := o.rt.tel.commitStart()
	var next alarmChange
	var err error
	if b.timers {
		if next, err = o.nextTimer(); err == nil && !next.del {
			err = o.rt.sched.ensureIndexed(o.ns.name, o.id, o.name, next.at)
		}
	}
	if err == nil && b.initMeta { // the batch creates the database: the catalog learns of it first
		err = o.cataloged()
	}
	if err == nil && o.rs != nil {
		err = o.beforeCommit(b)
	}
	if err == nil {
		err = o.store.Control("COMMIT")
	}
	if err == nil && o.rs != nil { // the output waits for the log to hold the commit
		err = o.ship(b)
	}
	o.batch = nil
	if err != nil {
		return b.finish(o.poison(err))
	}
	if b.dirty {
		o.rt.stats.commits.Add(1)
		o.rt.tel.committed(o, start, b.turns)
	}
	if b.timers {
		o.rt.sched.committed(o.ns.name, o.id, o.name, next)
	}
	err = b.finish(nil)
	if o.rs != nil {
		o.maybeSnapshot()
	}
	return err
}

// finish ends the batch: its output leaves (or, with err, is dropped) and its turns go on.
func (b *batch) finish(err error) error {
	b.err = err
	release(b.effects, err == nil)
	b.effects = nil
	close(b.done)
	return err
}

// poison handles a failure of the runtime's own transaction statements: the connection's state is
// unknown, so the batch is abandoned, the database closed and the instance dropped; the next turn
// rebuilds from what is durable.
func (o *object) poison(cause error) error {
	if o.rs != nil { // cluster mode: the local file may be ahead of the log
		return o.discard(cause)
	}
	err := fmt.Errorf("%w: %w", ErrCommitFailed, cause)
	if b := o.batch; b != nil {
		o.batch = nil
		b.finish(err)
	}
	if o.store != nil {
		o.store.Close()
		o.store = nil
		o.hasStore.Store(false)
		o.rt.stats.openDBs.Add(-1)
	}
	o.inst, o.built = nil, false
	return err
}

// await runs fn with the gate open: the turn so far is committed durably, other turns may run while
// fn runs, and the turn re-enters at the back of the queue when fn returns. fn's context does not
// mark the turn: the turn's storage and output are not reachable from it.
func (o *object) await(t *turn, fn func(context.Context) error) (err error) {
	if b := o.state.block; b != nil { // inside BlockConcurrencyWhile: the gate stays closed
		return fn(awaitCtx{b, t})
	}
	if err := t.endSegment(false); err != nil {
		return err
	}
	await := o.rt.tel.awaitStart(t)
	var cerr error
	if o.batch != nil {
		cerr = o.commit()
	}
	o.mu.Lock()
	o.awaiting++
	o.mu.Unlock()
	o.release()
	defer func() {
		from, gate := o.rt.tel.awaitDone(t, await)
		_, _ = o.acquire(t, nil, true)
		o.rt.tel.reentered(t, from, gate)
		o.mu.Lock()
		o.awaiting--
		o.mu.Unlock()
		t.flags.Or(turnLive)
		if o.rs != nil && err == nil { // cluster mode: the lease must still hold for the turn to go on
			err = o.claim()
		}
	}()
	if cerr != nil {
		return cerr
	}
	actx, cancel := context.WithCancel(awaitCtx{t.Context, t})
	defer cancel()
	defer context.AfterFunc(o.rt.base, cancel)()
	return fn(actx)
}

// awaitCtx is the context of an Await's fn: the turn's deadline, values and cancellation, but not
// the turn itself.
type awaitCtx struct {
	context.Context // the turn's caller's
	t               *turn
}

func (c awaitCtx) Value(key any) any {
	switch key {
	case turnKey{}:
		return nil
	case callerKey{}:
		return c.t
	}
	return c.t.Context.Value(key)
}

// checkDeadlock (called with o.mu held, taking no other lock) refuses a wait for o's gate that
// could never end: the gate's holder is t itself or one of the turns t is run for, or it waits,
// through a chain of gates, for one of them. A turn whose code called out with a context that is
// not its own cannot be seen through contexts; it is found on the goroutine's stack instead (only
// when t would wait).
func (o *object) checkDeadlock(t *turn) error {
	mine := t.chain
	h := o.holder.Load()
	for range 64 {
		if h == nil {
			return nil
		}
		next := h.waiting.Load()
		if !mine(h) && next != nil {
			h = next.holder.Load()
			continue
		}
		if mine(h) || t.parent() != nil && hiddenCallers(t) {
			return fmt.Errorf("%w (%s/%q); from inside a turn, pass the turn's context to calls", ErrDeadlock, o.ns.name, o.name)
		}
		return nil
	}
	return nil // a long chain, but not one through t
}

// hiddenCallers reports whether the goroutine runs more turn segments than t's chain of callers
// accounts for: a turn called out with a context that is not its own, and keeps its gate closed
// while it waits.
func hiddenCallers(t *turn) bool {
	known := 0
	for a := t.parent(); a != nil; a = a.parent() {
		known++
	}
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for more := true; more; {
		var f runtime.Frame
		if f, more = frames.Next(); strings.HasSuffix(f.Function, "core.(*object).invoke") {
			known--
		}
	}
	return known < 0
}
