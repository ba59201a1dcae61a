// Package inventory is the coordinator pattern: one object per item in
// stock, and every change to that item's stock goes through the object's
// turns. The invariant: the stock never goes below zero and every
// successful reservation is subtracted exactly once, however many callers
// reserve at the same time (SEMANTICS C1).
//
// An Inventory keeps one row, (stock, version), in its object's own SQLite
// database. Register a namespace of them, one object per item, and run
// their methods with core.Call, which runs a function as one turn of that
// item's object:
//
//	items, err := core.Register(rt, "inventory", inventory.New)
//	...
//	sku, err := items.Get("sku-42")
//	...
//	ok, err := core.Call(ctx, sku, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
//		return inv.Reserve(ctx, 1)
//	})
//
// # The rule
//
// Between deciding and writing, await nothing but storage. Storage calls
// keep the object's input gate shut, so a read followed by a write is one
// indivisible step. Anything else awaited in between (State.Sleep,
// State.Await, a call to another object or service) opens the gate and
// lets other turns change what was read.
//
//   - Reserve follows the rule.
//   - ReserveRacy breaks it on purpose, to show the lost updates
//     (SEMANTICS C2). Never copy it.
//   - ReserveVersioned shows what to do when the await cannot be avoided:
//     remember the version read, and write only if it is still the same
//     (optimistic concurrency, SEMANTICS C3).
//
// # Pitfalls
//
//   - Every write must bump the version, even those that never await
//     (Reserve and Restock do). A write that leaves the version alone is
//     invisible to ReserveVersioned, which then overwrites it.
//   - Optimistic concurrency degrades under contention. With N callers
//     racing for one item, each round of awaits lets one of them through,
//     so the last one needs N attempts and waits N awaits. Prefer doing the
//     await before the read (fetch the price first, then call Reserve), or,
//     when the decision is only "is there enough", a conditional write
//     after the await: UPDATE item SET stock = stock - ? WHERE stock >= ?.
//   - The methods run only inside a turn, with the turn's context (the one
//     core.Call passes); anywhere else they fail with core.ErrNotInTurn.
//   - Reserve is not idempotent. A caller that retries after an unknown
//     outcome (its own timeout, say) may reserve twice; if that matters,
//     record reservations under an order ID and make Reserve check it.
//   - One object serializes one item's traffic: a very hot item reaches
//     the object's throughput ceiling (SEMANTICS C5). Split the key, for
//     example one object per (item, warehouse).
//   - There are no transactions across objects (SEMANTICS G2): reserving
//     several items is several calls, and a failure part-way is undone by
//     Restock, not by a rollback.
//
// # When not to use it
//
// When the stock already lives in a transactional database, a row-level
// transaction or a conditional UPDATE there does the same job. Do not copy
// the data into an object just to lock it (SEMANTICS C4): an object is for
// an entity whose state is its own, not a lock on someone else's.
//
// # From any node
//
// Define makes an item's Stock, Restock and Reserve methods callable on any node of a cluster
// (core.Define): at a node that does not own the item they run at the one that does, so the
// invariant holds across machines; errors.Is(err, ErrInvalidQuantity) holds there too.
package inventory
