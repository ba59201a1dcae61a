package core

import (
	"context"
	"fmt"
	"time"
)

// State is an object's view of the runtime, handed to its constructor: identity, storage, Await and
// its alarm (see alarm.go). Keep it in the object; it is valid for its whole life in memory.
type State struct {
	o       *object
	storage Storage
	block   context.Context // inside BlockConcurrencyWhile: its context (touched by the gate holder)
	reset   bool            // a BlockConcurrencyWhile failed: the turn fails and the instance goes
}

// Name returns the object's name (available in every turn, alarms included). For a facet it is the
// facet's own name; see FacetPath.
func (st *State) Name() string { return st.o.place.name }

// ID returns the object's id, the hex of a hash of namespace and name.
func (st *State) ID() string { return st.o.id }

// Namespace returns the object's namespace name.
func (st *State) Namespace() string { return st.o.ns.name }

// Now returns the runtime's clock (Options.Now), by which alarms and schedules fall due. Object
// code should take the time from it, not time.Now, so a test that shifts the clock shifts all.
func (st *State) Now() time.Time { return st.o.rt.now() }

// Storage returns the object's storage.
func (st *State) Storage() *Storage { return &st.storage }

// Await runs fn with the object's input gate open, after committing the turn so far durably;
// meanwhile other calls' turns may run; when fn returns, the turn waits for the gate again behind
// the calls queued before it and goes on. ctx must be the turn's context. This is where
// interleaving happens: a value read before Await may be stale after it (SEMANTICS C2). If the turn
// fails after Await, only the part after it is rolled back. fn's context is not the turn's: storage
// and WebSocket output with it fail with ErrNotInTurn; pass it to calls to other objects.
func (st *State) Await(ctx context.Context, fn func(ctx context.Context) error) error {
	t, err := st.o.inTurn(ctx)
	if err != nil {
		return err
	}
	return st.o.await(t, fn)
}

// Sleep waits for d with the input gate open, like Await. It returns early with ctx's error if ctx
// is done (Runtime.Shutdown ends it too).
func (st *State) Sleep(ctx context.Context, d time.Duration) error {
	return st.Await(ctx, func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// BlockConcurrencyWhile runs fn with the input gate kept closed for all of it, even across waits
// that would open it: State.Await and State.Sleep inside fn wait with the gate closed (and commit
// nothing), and so do calls to other objects made with fn's context. No other call, alarm or
// WebSocket event of the object runs until fn returns; they queue. This is the original's
// blockConcurrencyWhile, for initialisation that needs a network call: call it in the constructor.
// ctx must be the turn's context; fn's context marks the turn too (storage works with it) and ends
// after BlockConcurrencyTimeout.
//
// If fn returns an error, panics or is still running at the timeout, the object is reset, as in
// the original: the turn fails (its writes since its last Await are rolled back, even if its code
// goes on and returns nil), the instance is dropped, and the next call runs the constructor again.
// BlockConcurrencyWhile then returns an error matching ErrObjectReset and fn's error (or
// context.DeadlineExceeded). A call back into the object from fn fails at once with ErrDeadlock.
func (st *State) BlockConcurrencyWhile(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if _, err := st.o.inTurn(ctx); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, BlockConcurrencyTimeout)
	defer cancel()
	outer := st.block
	st.block = bctx
	defer func() {
		st.block = outer
		if p := recover(); p != nil {
			st.reset = true
			panic(p)
		}
		if err == nil && bctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("ran over the limit of %v: %w", BlockConcurrencyTimeout, context.DeadlineExceeded)
		}
		if err != nil {
			st.reset = true
			err = fmt.Errorf("%w: %w", ErrObjectReset, err)
		}
	}()
	return fn(bctx)
}
