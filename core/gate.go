package core

import (
	"fmt"
	"runtime"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// The gate: one turn at a time per object, in FIFO order. It is a hand-off lock. A caller that
// finds it free takes it and runs its turn on its own goroutine; otherwise it queues and parks.
// When the holder is done, the first waiter gets the gate: handed to its goroutine directly, or,
// while callers keep queueing, its turn is run for it by a runner, a goroutine that holds the gate
// and runs the queued turns one after the other in FIFO order, waking each caller once its turn is
// over, or, if the turn's writes joined a batch still open, once that batch's commit is (see serve). A turn costs one mutex round trip when the object is idle; under contention the
// gate passes from turn to turn without a goroutine switch, and the callers' wake-ups run beside the
// turns instead of between them. A wait that could never end is refused (checkDeadlock).

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
	commit    trace.Span // the span of the caller's wait for b's commit, begun when its turn ended
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

// recycle gives w back once its caller is done with it. It goes to the spare slot if that is
// empty, without taking o.mu: under contention the callers, woken one after the other as their
// turns end, would otherwise queue for o.mu behind the goroutine passing the gate. The next caller
// to queue takes it (newWaiter).
func (o *object) recycle(w *waiter) {
	*w = waiter{ch: w.ch}
	if o.spare.Load() == nil && o.spare.CompareAndSwap(nil, w) {
		return
	}
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
		o.lastActive = o.rt.clock.Load()
		o.lastUse = o.rt.uses.Add(1)
		o.mu.Unlock()
		return nil
	}
}

// serve is a runner: it runs w's turn for its caller, then the next queued turn, and so on, holding
// the gate throughout, until the queue is empty (the gate is freed) or the next waiter must run on
// its own goroutine (it is handed the gate). Each caller is woken once: when its turn's commit is
// over (the batch wakes it), or when its turn has ended if nothing of it waits for a commit. Woken
// at the end of its turn only to wait for the commit, it would be one more goroutine switch per call
// while the runner goes on with the next turns. The turn's context is the caller's turn, as on the caller's
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
	o.rt.tel.Held(t.Context, nil, false)
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
	if b != nil && !b.over() { // the caller is woken once, by the commit, which it would wait for
		w.commit = o.rt.tel.CommitWait(t.Context)
		b.wake = append(b.wake, w)
		return o.pass(true)
	}
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

// newWaiter takes the spare waiter, or one from the free list, or makes one. o.mu is held: only
// recycle fills the spare slot, and only newWaiter empties it.
func (o *object) newWaiter() *waiter {
	if o.spare.Load() != nil {
		return o.spare.Swap(nil)
	}
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
	if o.arrival != nil { // the holder gathers callers for its batch (batch.go)
		close(o.arrival)
		o.arrival = nil
	}
}

// queued reports whether callers are waiting for the gate.
func (o *object) queued() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.qlen > 0
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
