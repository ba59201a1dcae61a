package inventory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/durable-go/durable/core"
)

// MaxStock is the most units one item can hold. It fits an int on every
// platform, so no stock or quantity can overflow.
const MaxStock = math.MaxInt32

var (
	// ErrInvalidQuantity is returned for a quantity below 1 or above
	// MaxStock, and by a Restock that would take the stock past MaxStock.
	// Nothing is changed.
	ErrInvalidQuantity = errors.New("inventory: invalid quantity")

	// ErrConflict is returned by ReserveVersioned when the stock changed
	// during its await on every attempt. Nothing was reserved; the call may
	// be retried, preferably after a pause.
	ErrConflict = errors.New("inventory: stock changed during every attempt")
)

// Options configure the inventories of a namespace made by Register. The
// zero value is ready to use.
type Options struct {
	// Await is how long ReserveRacy and ReserveVersioned wait between
	// reading the stock and writing it, standing for a call to another
	// service in the middle of the turn (default 1 ms).
	Await time.Duration

	// Attempts bounds ReserveVersioned's read, await, write attempts
	// (default 10). N callers racing for one item may need N attempts.
	Attempts int
}

func (o Options) withDefaults() Options {
	if o.Await <= 0 {
		o.Await = time.Millisecond
	}
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	return o
}

// Inventory is the stock of one item. Its methods are meant to run as
// turns of the item's object, through core.Call or core.Do, and take the
// turn's context. Turns never overlap, so an Inventory needs no lock.
type Inventory struct {
	st   *core.State
	opts Options
}

// New is the constructor to pass to core.Register: it creates the item's
// table if needed (stock 0) and uses the default Options.
func New(ctx context.Context, st *core.State) (*Inventory, error) {
	return newInventory(ctx, st, Options{}.withDefaults())
}

// Register adds to rt a namespace called name of inventories configured by
// opts, one object per item. With the zero Options it is
// core.Register(rt, name, New).
func Register(rt *core.Runtime, name string, opts Options) (*core.Namespace[*Inventory], error) {
	opts = opts.withDefaults()
	return core.Register(rt, name, func(ctx context.Context, st *core.State) (*Inventory, error) {
		return newInventory(ctx, st, opts)
	})
}

// migrations is the item's schema, one step per change, in order. Step 1
// is the statement the constructor ran before it used migrations (hence IF
// NOT EXISTS): on an item created then, it finds the table and changes
// nothing. Never edit a step once released; append a new one.
var migrations = []core.Migration{
	core.SQL(`CREATE TABLE IF NOT EXISTS item(
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	stock   INTEGER NOT NULL CHECK (stock >= 0),
	version INTEGER NOT NULL
);
INSERT OR IGNORE INTO item(id, stock, version) VALUES (1, 0, 0)`),
}

func newInventory(ctx context.Context, st *core.State, opts Options) (*Inventory, error) {
	if err := st.Storage().Migrate(ctx, migrations...); err != nil {
		return nil, err
	}
	return &Inventory{st: st, opts: opts}, nil
}

// Stock returns the units in stock.
func (inv *Inventory) Stock(ctx context.Context) (int, error) {
	stock, _, err := inv.read(ctx)
	return stock, err
}

// read returns the stock and its version.
func (inv *Inventory) read(ctx context.Context) (stock, version int, err error) {
	err = inv.st.Storage().QueryRow(ctx, "SELECT stock, version FROM item WHERE id = 1").Scan(&stock, &version)
	return stock, version, err
}

// Restock adds qty units to the stock.
func (inv *Inventory) Restock(ctx context.Context, qty int) error {
	if err := checkQuantity(qty); err != nil {
		return err
	}
	stock, _, err := inv.read(ctx)
	if err != nil {
		return err
	}
	if qty > MaxStock-stock {
		return fmt.Errorf("%w: %d more on a stock of %d would pass MaxStock (%d)", ErrInvalidQuantity, qty, stock, MaxStock)
	}
	_, err = inv.st.Storage().Exec(ctx, "UPDATE item SET stock = ?, version = version + 1 WHERE id = 1", stock+qty)
	return err
}

// Reserve takes qty units from the stock if there are that many, and
// reports whether it did.
//
// Between its read and its write there are only storage calls, which keep
// the input gate shut: no other turn runs in between, so concurrent
// reservations never oversell and never lose an update (SEMANTICS C1).
func (inv *Inventory) Reserve(ctx context.Context, qty int) (bool, error) {
	if err := checkQuantity(qty); err != nil {
		return false, err
	}
	stock, _, err := inv.read(ctx)
	if err != nil || stock < qty {
		return false, err
	}
	_, err = inv.st.Storage().Exec(ctx, "UPDATE item SET stock = ?, version = version + 1 WHERE id = 1", stock-qty)
	return err == nil, err
}

// ReserveRacy is Reserve done WRONG, kept as the counter-example. Never
// copy it.
//
// It waits Options.Await with State.Sleep (standing for a call to another
// service) between reading the stock and writing it. The await opens the
// input gate; other reservations run meanwhile, and each one then writes
// back the stock it read before the others wrote theirs: updates are lost
// and the item is oversold (SEMANTICS C2). Use Reserve, or ReserveVersioned
// when the await cannot be avoided.
func (inv *Inventory) ReserveRacy(ctx context.Context, qty int) (bool, error) {
	if err := checkQuantity(qty); err != nil {
		return false, err
	}
	stock, _, err := inv.read(ctx)
	if err != nil || stock < qty {
		return false, err
	}
	// WRONG: other turns run during this await, and stock goes stale.
	if err := inv.st.Sleep(ctx, inv.opts.Await); err != nil {
		return false, err
	}
	_, err = inv.st.Storage().Exec(ctx, "UPDATE item SET stock = ?, version = version + 1 WHERE id = 1", stock-qty)
	return err == nil, err
}

// ReserveVersioned is Reserve with an unavoidable await (Options.Await)
// between the read and the write, made safe by a version number
// (SEMANTICS C3).
//
// It reads the stock and its version, awaits, and writes only if the
// version is still the one it read. If another turn wrote in between, it
// starts again, at most Options.Attempts times in all, and then fails with
// ErrConflict having reserved nothing.
func (inv *Inventory) ReserveVersioned(ctx context.Context, qty int) (bool, error) {
	if err := checkQuantity(qty); err != nil {
		return false, err
	}
	for range inv.opts.Attempts {
		stock, version, err := inv.read(ctx)
		if err != nil || stock < qty {
			return false, err
		}
		if err := inv.st.Sleep(ctx, inv.opts.Await); err != nil {
			return false, err
		}
		res, err := inv.st.Storage().Exec(ctx,
			"UPDATE item SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?", stock-qty, version)
		if err != nil {
			return false, err
		}
		if res.RowsAffected == 1 {
			return true, nil
		}
		// Another turn wrote during the await: stock is stale. Read again.
	}
	return false, fmt.Errorf("%w (%d attempts)", ErrConflict, inv.opts.Attempts)
}

func checkQuantity(qty int) error {
	if qty < 1 || qty > MaxStock {
		return fmt.Errorf("%w: %d (want 1 to %d)", ErrInvalidQuantity, qty, MaxStock)
	}
	return nil
}
