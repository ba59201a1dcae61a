package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/core/internal/telemetry"
)

// A turn is one call's (or one event's) run on an object. This file is its life: where it begins
// (run, runTurn), how its segments run (invoke), how it waits with the gate open (await) and where
// it ends (end). How its writes and output commit and leave is in batch.go; how it waits for and
// passes the gate is in gate.go.
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
	drops   bool     // the segment deleted the object's facets (DeleteAll)
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
	if tel != nil { // off, the turn's context stays as it is, unwritten
		t.Context = tel.Begin(t.Context, o.ns.stat, o.place.name)
	}
	w, err := o.acquire(t, code, reentry)
	if err != nil {
		tel.Held(t.Context, err, err == errEvicted)
		return o.refused(err)
	}
	if w != nil { // a runner ran the turn (and measured its wait for the gate)
		err, b, exited, commit := w.err, w.b, w.exited, w.commit
		o.recycle(w)
		if commit == nil {
			commit = tel.CommitWait(t.Context)
		}
		if werr := b.wait(); err == nil {
			err = werr
		}
		tel.Done(t.Context, commit, err)
		if exited {
			runtime.Goexit()
		}
		return err
	}
	tel.Held(t.Context, nil, false)
	defer func() {
		commit := tel.CommitWait(t.Context)
		if werr := t.end(); err == nil {
			err = werr
		}
		tel.Done(t.Context, commit, err)
	}()
	return o.runHeld(t, code, reentry, body)
}

// postTurn queues code as the turn t of o without waiting for it (a WebSocket message's delivery):
// then gets its outcome once its writes are durable, and calls t.posted.
func (o *object) postTurn(t *turn, code turnCode, then func(error)) error {
	t.Context = o.rt.tel.Begin(t.Context, o.ns.stat, o.place.name)
	err := o.post(t, code, then)
	if err != nil {
		o.rt.tel.Held(t.Context, err, err == errEvicted)
	}
	return err
}

// posted ends the measurements of a turn that postTurn queued, once its outcome is known.
func (t *turn) posted(err error) { t.o.rt.tel.Done(t.Context, nil, err) }

// eventSpan starts the span of an event the runtime delivers on its own (an alarm run, a WebSocket
// message) to the object obj of ns; the span of the turn that runs it is its child. eventEnd ends
// it.
func (rt *Runtime) eventSpan(ctx context.Context, name string, ns *namespace, obj string) (context.Context, trace.Span) {
	return rt.tel.EventSpan(ctx, name, ns.stat, obj)
}

func eventEnd(sp trace.Span, err error) { telemetry.End(sp, err) }

// runHeld runs the turn t, which holds the gate: body, or else code. alarm tells a run of timers,
// whose failing constructor retries or dead-letters the due timers.
func (o *object) runHeld(t *turn, code turnCode, alarm bool, body func(*turn) error) error {
	if o.rt.isClosed.Load() {
		return ErrClosed
	}
	if o.repl != nil {
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
	o.rt.counts.Construct()
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
	o.rt.counts.Turn()
	o.rt.running.Add(1)
	o.rt.tel.SegmentStart(t.Context)
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
		o.rt.tel.SegmentEnd(t.Context, err)
	}()
	if err = fn(t, o.inst); err != nil {
		err = &RemoteError{Err: err}
	}
	normal = true
	return err
}

// hold runs fn holding the object's gate, as a turn that builds no instance and runs no code of the
// object's, with no batch open (one handed over with the gate is committed first). fn may run turns
// of its own through runTurnNoCtor.
func (o *object) hold(ctx context.Context, fn func() error) error { return o.holdAs(ctx, true, fn) }

// holdLocal is hold for work on the local file alone (the background check): in cluster mode it
// does not claim the object.
func (o *object) holdLocal(ctx context.Context, fn func() error) error {
	return o.holdAs(ctx, false, fn)
}

func (o *object) holdAs(ctx context.Context, claim bool, fn func() error) error {
	t := &turn{Context: ctx, o: o}
	if _, err := o.acquire(t, nil, false); err != nil {
		return err
	}
	if claim && o.repl != nil {
		if err := o.claim(); err != nil {
			o.release()
			return err
		}
	}
	if o.batch != nil { // the gate came with a batch open for us to join: commit it first
		if err := o.commit(); err != nil {
			o.release()
			return err
		}
	}
	o.holding = t
	defer func() {
		o.holding = nil
		if b := o.batch; b != nil {
			o.commit()
		}
		o.release()
	}()
	return fn()
}

// runTurnNoCtor runs body as a turn of the object whose gate hold holds, and commits it.
func (o *object) runTurnNoCtor(body func(t *turn) error) error {
	t := o.holding
	err := body(t)
	if o.batch != nil {
		if cerr := o.commit(); err == nil {
			err = cerr
		}
	}
	return err
}

// await runs fn with the gate open: the turn so far is committed durably, other turns may run while
// fn runs, and the turn re-enters at the back of the queue when fn returns. fn's context does not
// mark the turn: the turn's storage and output are not reachable from it.
func (o *object) await(t *turn, fn func(context.Context) error) (err error) {
	if b := o.state.block; b != nil { // inside BlockConcurrencyWhile: the gate stays closed
		return fn(awaitCtx{b, t})
	}
	if err := recordFrame(t); err != nil { // a relayed message's number, with what it wrote so far
		return err
	}
	if err := t.endSegment(false); err != nil {
		return err
	}
	await := o.rt.tel.AwaitStart(t.Context)
	var cerr error
	if o.batch != nil {
		cerr = o.commit()
	}
	o.mu.Lock()
	o.awaiting++
	o.mu.Unlock()
	o.release()
	defer func() {
		from, gate := o.rt.tel.AwaitDone(t.Context, await)
		_, _ = o.acquire(t, nil, true)
		o.rt.tel.Reentered(t.Context, from, gate)
		o.mu.Lock()
		o.awaiting--
		o.mu.Unlock()
		t.flags.Or(turnLive)
		if o.repl != nil && err == nil { // cluster mode: the lease must still hold for the turn to go on
			err = o.resume()
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
