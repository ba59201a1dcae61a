// Package inventory is exercise 1 of the workshop: the coordinator (original
// 003, SEMANTICS C1-C3). One object stands for one item in stock, and every
// change to that item goes through the object's turns.
//
// Fill in the TODOs, then check your answer:
//
//	go test -tags exercises ./exercises/inventory
//
// Part 1: New, Stock, Restock and Reserve. The rule to keep: between
// reading the stock and writing it back, await nothing but storage.
// Storage calls keep the object's input gate shut, so a read followed by a
// write is one step that no other turn can split; that is what makes fifty
// concurrent reserves exact.
//
// Part 2: ReserveVersioned. Here the await cannot be avoided (it stands for
// a call to a pricing service between the read and the write): keep a
// version number next to the stock, bump it on every write, and write only
// if it is still the version you read; otherwise read again, at most
// Options.Attempts times, then fail with ErrConflict.
//
// The reference solution is package patterns/inventory; the tests run
// against it with -tags 'exercises solution'.
package inventory

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/core"
)

var (
	// ErrInvalidQuantity is returned, wrapped, for a quantity below 1.
	ErrInvalidQuantity = errors.New("inventory: invalid quantity")

	// ErrConflict is returned, wrapped, by ReserveVersioned when the stock
	// changed during its await on every attempt.
	ErrConflict = errors.New("inventory: stock changed during every attempt")
)

// errTODO is what the unfinished methods return.
var errTODO = errors.New("inventory: not implemented yet (see the TODO)")

// Options configure the inventories of a namespace.
type Options struct {
	Await    time.Duration // ReserveVersioned's wait between read and write (default 1 ms)
	Attempts int           // ReserveVersioned's attempts (default 10)
}

// Inventory is the stock of one item. Its methods run as turns of the
// item's object (core.Call) and take the turn's context.
type Inventory struct {
	st   *core.State
	opts Options
}

// Register adds a namespace of inventories to rt.
func Register(rt *core.Runtime, name string, opts Options) (*core.Namespace[*Inventory], error) {
	if opts.Await <= 0 {
		opts.Await = time.Millisecond
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 10
	}
	return core.Register(rt, name, func(ctx context.Context, st *core.State) (*Inventory, error) {
		return newInventory(ctx, st, opts)
	})
}

// New is the constructor with the default options.
func New(ctx context.Context, st *core.State) (*Inventory, error) {
	return newInventory(ctx, st, Options{Await: time.Millisecond, Attempts: 10})
}

// newInventory runs each time the object is activated, as the object's
// first turn: ctx is that turn's.
func newInventory(ctx context.Context, st *core.State, opts Options) (*Inventory, error) {
	// TODO: create the item's table if it does not exist, with one row:
	// stock 0 (and, for part 2, version 0). It runs on every activation, so
	// it must not reset a stock that is already there. Every storage call
	// takes the turn's ctx: st.Storage().Exec(ctx, ...).
	return &Inventory{st: st, opts: opts}, nil
}

// Stock returns the units in stock.
func (inv *Inventory) Stock(ctx context.Context) (int, error) {
	// TODO: read the stock from the object's storage
	// (inv.st.Storage().QueryRow(ctx, ...)).
	return 0, errTODO
}

// Restock adds qty units to the stock. A qty below 1 fails with
// ErrInvalidQuantity.
func (inv *Inventory) Restock(ctx context.Context, qty int) error {
	// TODO
	return errTODO
}

// Reserve takes qty units if there are that many and reports whether it
// did. A qty below 1 fails with ErrInvalidQuantity.
func (inv *Inventory) Reserve(ctx context.Context, qty int) (bool, error) {
	// TODO: read the stock; if it is below qty, return false; else write
	// stock - qty. No await in between.
	return false, errTODO
}

// ReserveVersioned is Reserve with an await of Options.Await between the
// read and the write (use inv.st.Sleep(ctx, inv.opts.Await)), made safe by
// a version number. It fails with ErrConflict after Options.Attempts
// attempts that each found the stock changed.
func (inv *Inventory) ReserveVersioned(ctx context.Context, qty int) (bool, error) {
	// TODO (part 2): read stock and version; sleep; write only if the
	// version is unchanged (UPDATE ... WHERE version = ?, and check
	// Result.RowsAffected); otherwise try again.
	return false, errTODO
}
