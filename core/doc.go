// Package core runs durable objects: named, single-threaded actors, each with its own SQLite
// database, one durable alarm, and a queue of calls. A caller gets its result only once the writes
// behind it are durable, no two turns of an object interleave, and an alarm once set is delivered
// at least once, across crashes and restarts.
//
// An object is addressed by (namespace, name). The runtime keeps at most one live instance per
// address and runs its code one turn at a time, in the order the calls arrived. A turn is the code
// between two points where the object waits for something that is not its own storage: Call runs
// one, and State.Await (or a call to another object) splits a turn in two. The object's code sees
// the runtime through State: its name, Storage (SQL and a KV API), Await, its clock, alarm and
// schedule. Most callers need Register, Get and Call (Do for no result):
//
//	rt, err := core.Open(core.Options{Dir: "data"})
//	ns, err := core.Register(rt, "inventory", NewInventory) // func(ctx, *core.State) (*Inventory, error)
//	stub, err := ns.Get("sku-42")
//	ok, err := core.Call(ctx, stub, func(ctx context.Context, inv *Inventory) (bool, error) {
//		return inv.Reserve(ctx, 3)
//	})
//
// Around this centre, each layer is off until asked for. Operations: [Runtime.Admin] lists,
// inspects, queries, checks, backs up, exports, quarantines and restores objects and re-arms dead
// letters, each object through its gate (see [Admin]). Cluster mode: [Options.Replication] makes
// the runtime one node of a cluster (see below). Telemetry: [Options.Meter] and [Options.Tracer]
// take OpenTelemetry providers, [Options.Logger] a *slog.Logger (see below).
//
// # Guarantees
//
//   - One instance per address, across evictions and restarts (the file name hashes the name).
//   - The turn's context. Every operation acting in a turn (storage, alarms, WebSocket sends) takes
//     the context the turn's code was given; with any other (another goroutine's, an earlier
//     turn's, Await's function's) it fails with ErrNotInTurn, never joining whatever turn runs.
//   - Input gate. Storage calls never let another turn in; only Await, and calls to other objects
//     made with the turn's context, open the gate. Values read before an Await may be stale after.
//   - Atomic turns. A turn that returns an error or panics is rolled back (a SAVEPOINT), leaving
//     nothing partial in storage or output. A panic (a *PanicError for the caller) or a
//     runtime.Goexit also drops the instance: the constructor rebuilds it for the next event.
//   - Output gate. A result leaves only once the commit holding the turn's writes (and any writes
//     it read) is durable: WAL, synchronous=FULL by default (in cluster mode, once the log holds
//     it, and NORMAL locally). Queued turns share one transaction and one fsync (group commit); an
//     idle object commits at once. A batch that finds nobody queued while it holds fewer turns
//     than the last one lets runnable goroutines run once (a yield, no clock) before it commits,
//     so that the last batch's callers on their way back join it. In cluster mode a batch that holds fewer turns than the last one
//     (with those that queued while it committed) waits for its callers to come back, for at most
//     half as long as its last append to the log took (at most 20 ms), before it commits.
//   - Alarms are delivered at least once: a timer stays stored until its run's last segment
//     commits (see Alarmer, RetryPolicy). One out of retries, or whose constructor keeps failing,
//     goes to a dead-letter table (Admin.DeadLetters), never vanishes.
//   - No silent deadlocks. A call, TriggerAlarm or Rearm that would wait for a gate held by a turn
//     waiting for the caller fails at once with ErrDeadlock.
//
// # Concurrency
//
// Runtime, Namespace, Stub and Admin are safe for concurrent use. An object's fields are touched
// only by its turns, one at a time: they need no locks. A call runs its turn on the caller's
// goroutine (no mailbox goroutine), and the gate passes from one waiting caller to the next in FIFO
// order; under contention one goroutine holding the gate may run the queued turns in turn, with the
// same order, contexts and outcomes (a panic's stack then shows that goroutine). A full queue
// (Options.MaxQueue) fails a call at once with ErrOverloaded. A context cancelled while queued ends
// the wait; a running turn is not interrupted.
// State.BlockConcurrencyWhile keeps the gate closed across waits; its failure or timeout
// (BlockConcurrencyTimeout) resets the object (ErrObjectReset). Runtime.Shutdown stops new calls,
// cancels the runtime's base context, waits until what runs has finished or its ctx ends, and
// reports what it abandoned; Close is Shutdown bounded by CloseTimeout.
//
// # Persistence
//
// One runtime owns a directory: Open takes an OS lock; a second Open fails with a *LockedError
// (ErrLocked) naming the holder's PID. Each object's database is Dir/<namespace>/<id>.sqlite; the
// commit that creates it enters the object in the catalog (Namespace.List). Dir/_runtime.sqlite
// (alarm index, dead letters, catalog) is derived state, rebuilt at Open from the objects' own
// tables if missing or damaged. A known object whose database is missing, empty or damaged (a bad
// header at its first open, a corrupt page met as it is read, or a failed quick check, which runs
// in the background after the first open) refuses with ErrDamaged (a *DamagedError) until
// Admin.Quarantine or Admin.Restore repairs it; Admin.Backup copies a running directory. An object
// idle for a second keeps its database open but gives back its memory (page cache, statements,
// lookaside: Stats.QuietDBs); after half Options.IdleTimeout its database's connection closes and
// one descriptor keeps the file locked until its next call (Stats.ParkedDBs); objects idle for
// Options.IdleTimeout (10 s),
// or past Options.MaxOpenObjects (by default sized by the descriptor limit and memory; Stats says
// what was chosen), are evicted: the database closes (with no checkpoint at
// synchronous=FULL unless its log is past 128 KiB; always at NORMAL), off the caller's goroutine,
// and the next event runs the constructor again as the first turn, once that close is done. An
// open database holds its file alone (on Linux with a lock of its own, so that opening a database
// costs the same however many are open: SEMANTICS O10).
//
// # Telemetry
//
// Options.Meter and Options.Tracer take OpenTelemetry providers (the runtime never uses the global
// ones), each off when nil, and off costs no allocation or lock per call; Options.Logger takes a
// *slog.Logger (nil: slog.Default()). The metrics (per namespace, and cluster mode's) and the spans
// are named in the README's section "Operating it" and in chapter 10 of the cookbook. The logger
// receives what the runtime decides on its own, each record with an event and the object's
// namespace and name: evicted (Debug), alarm_retry, alarm_dropped, damaged, deadlock_refused,
// websocket_slow_cut, index_rebuild and index_rebuilt.
//
// # Cluster mode
//
// Options.Replication makes the runtime one node of a cluster (see Replication, and package
// replog's Log, Leases and Beacon: package cluster fills them with NATS JetStream,
// replogtest.MemCluster in memory for tests). Each object's commits are records in its own log,
// appended after SQLite's COMMIT and before any result leaves, expecting the log's last sequence,
// so an append another writer beat is refused. Objects fall into a fixed number of shards; one node
// serves a shard's objects under the shard's lease, renewed every quarter LeaseTTL (default 1 s).
// Another node's call fails at once with ErrNotOwner (a *NotOwnerError naming the holder and the
// address it advertises, Replication.Advertise, from the node's table of who beats and holds what;
// Stub.ServeHTTP answers 421 with the headers Durable-Owner and Durable-Owner-Address) until it has seen the lease unrenewed for LeaseTTL;
// then it takes over, replays the object's log and appends an epoch record fencing the old owner
// (ErrFenced at its next commit). A dead node's shards are taken over by the survivors without
// waiting for a call, and a node holding a shard that rendezvous hashing places at another live
// node hands it over, a few per LeaseTTL, so a node that comes back gets its share back. A turn whose lease cannot be proven valid is refused (ErrLeaseUnproven); an
// append whose outcome stays unknown fails with ErrCommitUnknown. Local files are a cache, rebuilt
// from the latest snapshot and the records after it; the eviction of a shard's last object (unless
// the shard has pending alarms), and Shutdown, which drains first, hand its lease back.
// Stats().Cluster says whether the node is ready, and lists the members (Nodes) and which shard each
// live one holds (Owners). Restore and Quarantine are refused (ErrClusterMode). A facet's commits
// are records of its root's log, so a facet moves, replays, snapshots and is fenced with its root,
// and its alarm (a timer of its root's) runs where the root's would. An alarm
// runs on the node holding the object's shard: each shard keeps an alarm index with its records,
// written before the commit that sets an alarm is acknowledged and loaded by whichever node takes
// the shard, so a dead owner's alarm runs at a survivor without a call (late by the takeover if it
// fell due before), at most AlarmConcurrency at a time.
//
// # Calls from any node
//
// A closure cannot cross machines; a named method can. Define registers a method of a namespace,
// with argument and result types that encode as JSON, and returns the function that calls it on
// the object wherever it lives. It runs here, with nothing encoded, in the single-process runtime
// and on the node that may serve the object. With Replication.Calls (package cluster: NATS request-reply on one subject per
// node), a node whose table names another owner sends the call there with a request id. The
// receiving node never sends it on: it runs it, or answers "moved" from its table, and the caller
// follows with the same id; the node that ran it remembers the id and the reply for a while, so a
// request sent again after a lost reply is answered and not run twice. ErrOverloaded and
// ErrCommitUnknown come back as they are; moved, ErrFenced and a lost reply are followed within
// Replication.CallAttempts, then ErrUnreachable (delivered to no owner: it ran nowhere). A request
// delivered and not answered is sent again to that node alone; if it cannot be asked again, the
// call fails with ErrCommitUnknown: it may have run. Errors keep their sentinels across the hop, and an
// object's own error is a *RemoteError with its message, for which errors.Is holds with the
// namespace's own sentinels that its Define calls name (Define's errs: out of stock, say). A method called from a turn opens the
// caller's gate while it waits, so A -> B -> A completes across nodes; a call that would wait for a
// gate kept closed along its way (BlockConcurrencyWhile) fails with ErrDeadlock. Stub.ServeHTTP
// relays a request to the owner the same way (413 over Replication.MaxRelayBody). A WebSocket
// upgrade is accepted at the node that received it, the edge, which keeps the connection and relays
// its traffic to the object's owner and back, in order per connection; when the object's shard
// moves, each edge registers its connections with the new owner, so they stay open, and messages
// sent to an owner lost before it answered go to the next one, which skips those its commits hold
// (a message's writes are never applied twice). A connection that cannot follow (no owner reached
// for 30 s at a ready edge, four lease times at one that is not) closes with CloseServiceRestart,
// and one whose edge died is reported closed with 1006. core.Call stays local: where another node owns
// the object it fails with ErrNotOwner, naming it.
//
// # Errors
//
// Errors about an object are *Error values naming it; the object's own errors (returned or
// panicked) are wrapped in *RemoteError. IsRetryable accepts ErrOverloaded, ErrCommitFailed,
// ErrLeaseUnproven and ErrUnreachable. Each sentinel's doc says when it is returned.
//
// # Caveats
//
//   - A call from inside a turn must be given the turn's context: with another one the caller's
//     gate stays closed while it waits. A chain that comes back to the busy gate through a turn
//     passing its own context is refused with ErrDeadlock; a call with another context straight
//     back to the calling object cannot be told from an outside one, and waits for ever.
//   - A turn failing after an Await rolls back only what follows it: Await commits the turn so far.
//   - A failing alarm run keeps none of its writes (the original keeps them): commit an attempt
//     log with an Await before the work that may fail. SEMANTICS.md lists every deliberate
//     difference from the original in one place.
package core
