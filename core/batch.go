package core

import (
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/durable-go/durable/core/internal/telemetry"
	"github.com/durable-go/durable/core/internal/wsconn"
)

// A turn's writes and output, from its segments to their commit. A segment's writes run in a
// savepoint of the object's open batch (a group commit: the segments whose writes share one
// transaction), or in the batch's transaction itself when the segment opened it (db); its output
// is a list of effects, held until the batch commits (endSegment). The batch commits when no other
// turn is queued to join it (leave, commit); then its output leaves and its turns go on. A failure
// of the batch's own statements, or of its commit, fails the object (fail).

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
				e.ws.rt.tel.Count(e.ws.ns.stat, telemetry.MessageOut)
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
	drops    bool // a segment in it deleted the object's facets (DeleteAll): in cluster mode its record says so
	effects  []effect
	// wake are the callers whose turns a runner ran into the batch: each is woken once, when the
	// commit is over (finish), instead of once at its turn's end and again at the commit.
	wake []*waiter
	// gatherEnd is when the batch stops waiting for callers to join it (gather); zero until it first
	// waits.
	gatherEnd time.Time
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

// db returns the open database with the segment's savepoint in place, opening the database and the
// group-commit batch as needed.
func (t *turn) db() (*store, error) {
	o := t.o
	t.seg()
	if o.store == nil {
		if o.repl != nil {
			if err := o.repl.Servable(); err != nil {
				return nil, err
			}
		}
		o.ns.waitClosed(o.id)
		st, fresh, err := o.openDB()
		if err != nil {
			return nil, fmt.Errorf("core: open database: %w", err)
		}
		if o.repl != nil {
			if err := o.repl.Opened(fresh); err != nil {
				st.Close()
				return nil, fmt.Errorf("core: open database: %w", err)
			}
		}
		o.AdoptDB(st, fresh)
	}
	st := o.store
	if o.batch == nil {
		if err := st.Control("BEGIN"); err != nil {
			return nil, o.fail(err)
		}
		o.batch = &batch{done: make(chan struct{})}
		t.sp = spTx
		if o.fresh {
			err := st.ExecOwn(runtimeSchema)
			if err == nil {
				err = o.initMeta(st)
			}
			if err == nil {
				err = st.ExecOwn(markSchema)
			}
			if err != nil {
				return nil, o.fail(err)
			}
			o.fresh = false
			o.batch.dirty, o.batch.initMeta = true, true
		}
	}
	if t.sp == spNone {
		if err := st.Control("SAVEPOINT turn"); err != nil {
			return nil, o.fail(err)
		}
		t.sp = spSavepoint
	}
	return st, nil
}

// write is db for statements that change something.
func (t *turn) write() (*store, error) {
	st, err := t.db()
	if err == nil {
		t.dirty()
	}
	return st, err
}

// dirty marks the open batch as having written something (db opened it).
func (t *turn) dirty() { t.o.batch.dirty = true }

// wrote reports whether the open batch has written something so far.
func (t *turn) wrote() bool { return t.o.batch != nil && t.o.batch.dirty }

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
	drops := t.drops && !failed
	t.timers, t.drops = false, false

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
		b.close()
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
		err = o.fail(err)
		failed = true
	}
	if b := o.batch; b != nil && !failed {
		if sp != spNone {
			b.turns++
		}
		b.timers = b.timers || timers
		b.drops = b.drops || drops
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
		if !queued && b.turns < o.lastBatch && (b.turns == 1 || b.dirty) {
			// The callers of the last batch were all released at once by its commit; this batch
			// should not commit without those still on their way: woken, runnable, but not yet run
			// (behind this goroutine on its processor). Give them a moment to queue. A caller that
			// does not come back costs one yield per batch; a clean batch appends nothing and only
			// yields for its first turn.
			runtime.Gosched()
			queued = o.queued()
		}
		if !queued && b.dirty && b.turns < o.expect && b.turns < o.rt.opts.MaxBatch { // a clean batch appends nothing
			queued = o.gather(b)
		}
		if b.turns >= o.rt.opts.MaxBatch || !queued {
			o.lastBatch = b.turns
			o.commit()
		}
	}
	return b
}

// gather waits, in cluster mode, for another caller to queue and join the open batch b, which holds
// fewer turns than expected: the last batch's and those that queued while it committed. The last
// batch's callers, released together by its commit, may be on their way back, and in cluster mode
// that way may be a round trip between nodes (a routed call's reply, then its caller's next
// request). Committing without them would make them wait for this commit's append to the log and
// then for their own: two quorum round trips instead of one. The batch waits at most half as long
// as the last append took, and at most maxGather, counted from its first wait; a caller that queues
// ends the wait and joins the batch. An object whose callers do not come back (each sends one
// request) pays that wait once per batch. gather reports whether a caller queued.
func (o *object) gather(b *batch) bool {
	if o.repl == nil || o.lastShip <= 0 {
		return false
	}
	now := time.Now()
	if b.gatherEnd.IsZero() {
		b.gatherEnd = now.Add(min(o.lastShip/2, maxGather))
	}
	d := b.gatherEnd.Sub(now)
	if d <= 0 {
		return false
	}
	o.mu.Lock()
	if o.qlen > 0 {
		o.mu.Unlock()
		return true
	}
	arrival := make(chan struct{})
	o.arrival = arrival
	o.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-arrival:
	case <-t.C:
	}
	t.Stop()
	o.mu.Lock()
	o.arrival = nil
	queued := o.qlen > 0
	o.mu.Unlock()
	return queued
}

// maxGather bounds how long a batch waits for callers to join it (gather).
const maxGather = 20 * time.Millisecond

// commit makes the open batch durable, then releases its output and every turn waiting for it. If
// the batch changed a timer, the runtime's alarm index learns the earliest one before the commit
// (so a crash can leave an early index entry, never a missing one) and the scheduler after it.
func (o *object) commit() error {
	b := o.batch
	start := o.rt.tel.CommitStart()
	var next alarmChange
	var err error
	if b.timers {
		if next, err = o.nextTimer(); err == nil && !next.del {
			err = o.rt.sched.EnsureIndexed(o.ns.name, o.id, o.name, next.at)
		}
	}
	if err == nil && b.initMeta { // the batch creates the database: the catalog learns of it first
		err = o.cataloged()
	}
	if err == nil && o.repl != nil {
		err = o.repl.Prepare(o.store, b.dirty)
	}
	if err == nil && o.repl != nil && b.timers && !next.del { // the shard's alarm index, too (S-CL9)
		err = o.repl.IndexAlarm(next.at)
	}
	if err == nil {
		err = o.store.Control("COMMIT")
	}
	if err == nil && o.repl != nil && b.drops { // a facet's database read from the log after it starts empty
		o.repl.DropFacets(o.facetsTag())
	}
	if err == nil && o.repl != nil { // the output waits for the log to hold the commit
		shipStart := time.Now()
		err = o.repl.Ship(o.store, b.dirty)
		if b.dirty {
			o.lastShip = time.Since(shipStart)
		}
	}
	if err != nil {
		return o.fail(err)
	}
	o.batch = nil
	if b.dirty {
		o.rt.counts.Commit()
		o.rt.tel.Committed(o.ns.stat, start, b.turns)
	}
	if b.timers {
		o.rt.alarmCommitted(o.ns.name, o.id, o.name, next)
		if o.repl != nil {
			o.repl.AlarmCommitted(next.at)
		}
	}
	o.mu.Lock() // before its callers are released: those queued now came while it committed
	o.expect = b.turns + o.qlen
	o.mu.Unlock()
	err = b.finish(nil)
	if o.repl != nil {
		if serr := o.repl.Committed(o.store); serr != nil {
			o.fail(serr)
		}
	}
	return err
}

// nextTimer returns the earliest due time of all the object's timers, a running one included (its
// run may not end), for the commit path.
func (o *object) nextTimer() (alarmChange, error) {
	var at sql.NullInt64
	err := o.store.QueryOwn("SELECT min(at) FROM main._durable_timers", nil, func(rows *sql.Rows) error { return rows.Scan(&at) })
	return alarmChange{at: at.Int64, del: !at.Valid}, err
}

// finish ends the batch: its output leaves (or, with err, is dropped) and its turns go on.
func (b *batch) finish(err error) error {
	b.err = err
	release(b.effects, err == nil)
	b.effects = nil
	b.close()
	return err
}

// close marks the commit over and wakes the callers waiting for it.
func (b *batch) close() {
	close(b.done)
	for _, w := range b.wake {
		w.ch <- struct{}{} // w is its caller's from here
	}
	b.wake = nil
}

// fail is the one failure path of an object: the runtime's own transaction statements failed (the
// connection's state is unknown), or its commit could not be made, or, in cluster mode, another
// node took it over. The open batch is abandoned (its turns receive the error, its output is
// dropped), the database closed and the instance dropped; the next turn rebuilds from what is
// durable. In cluster mode the local file goes too: it may be ahead of the log.
func (o *object) fail(cause error) error {
	err := cause
	switch {
	case errors.Is(cause, ErrFenced), errors.Is(cause, ErrLeaseUnproven), errors.Is(cause, ErrCommitUnknown), errors.Is(cause, ErrCommitFailed):
	default:
		err = fmt.Errorf("%w: %w", ErrCommitFailed, cause)
	}
	if b := o.batch; b != nil {
		o.batch = nil
		b.finish(err)
	}
	o.unload()
	if o.repl != nil {
		o.repl.Failed(o, cause)
	}
	return err
}
