// Package core runs durable objects: named, single-threaded actors, each with its own SQLite
// database, one durable alarm, and a queue of calls.
//
// An object is addressed by (namespace, name). The runtime keeps at most one live instance per
// address and runs its code one turn at a time, in the order the calls arrived. A turn is the code
// between two points where the object waits for something that is not its own storage: Call runs
// one, and State.Await (or a call to another object) splits a turn in two.
//
//	rt, err := core.Open(core.Options{Dir: "data"})
//	ns, err := core.Register(rt, "inventory", NewInventory) // func(ctx, *core.State) (*Inventory, error)
//	stub, err := ns.Get("sku-42")
//	ok, err := core.Call(ctx, stub, func(ctx context.Context, inv *Inventory) (bool, error) {
//		return inv.Reserve(ctx, 3)
//	})
//
// Runtime (with Options) hosts Namespaces; a Stub addresses an object (Namespace.NewUniqueID makes
// an unguessable name for one); State is the object's view of the runtime (its name, Storage,
// Await and BlockConcurrencyWhile, clock, alarm and schedule); Storage is its database (Rows, Row,
// Result, the KV methods, Migrate). Objects may implement Alarmer, TimerHandler, Fetcher and the WebSocket
// handlers; a WebSocket is a handle to a connection the runtime owns. FacetKind hosts child
// objects. Errors are *Error values; DeadLetter records an alarm given up; ObjectInfo is an entry of
// the catalog; BackupProgress reports a backup; ObjectReport, QueryResult and Problem are what
// inspection finds.
//
// # The turn's context
//
// Object code receives a context in every turn (fn's in Call, the constructor's, a handler's) that
// marks the turn; every operation acting in the turn takes it: storage (Exec, Query, Get, Put ...),
// the alarm and schedule methods, WebSocket Send and Close, AcceptWebSocket. Outside a running turn
// (another goroutine, a context kept from an earlier turn, Await's function) they fail with
// ErrNotInTurn, never joining whatever turn runs. Pass it to helpers and to calls to other objects.
//
// # Guarantees
//
//   - One instance per address, across evictions and restarts (the file name hashes the name).
//   - Input gate. A turn runs alone. Storage calls never let another turn in; only Await (and calls
//     to other objects made with the turn's context) open the gate, so a read and a write with no
//     Await between them cannot be interleaved. Values read before an Await may be stale after it.
//   - Atomic turns. A turn's writes run in a SAVEPOINT: a turn that returns an error or panics is
//     rolled back, leaving nothing partial in storage or output. A returned error keeps the
//     instance and its memory; a panic (a *PanicError for the caller) or a runtime.Goexit also
//     drops the instance, so the constructor rebuilds it from storage for the next event.
//   - Output gate and durability. A caller gets its result only once the commit holding the turn's
//     writes (and any writes it read) is durable: WAL, synchronous=FULL by default. Queued turns
//     share one transaction and one fsync (group commit); an idle object commits at once.
//   - Alarms are durable and delivered at least once, whatever the handler awaits: a timer stays
//     stored (marked running) until its run's last segment commits; see Alarmer and RetryPolicy. An
//     alarm out of retries goes to a dead-letter table (Runtime.DeadLetters), never vanishes; so
//     does one whose object's constructor keeps failing.
//   - No silent deadlocks. A call, TriggerAlarm or Rearm that would wait for a gate held by a turn
//     waiting for the caller fails at once with ErrDeadlock.
//
// # Storage
//
// SQL: Exec, Query, QueryRow (the first row, as database/sql) and One (exactly one row, else
// ErrNoResults or ErrMultipleResults); errors carry SQLite's text; arguments must match the
// statement's parameters (ErrArgCount) and a query must hold a statement (ErrNoStatement); values
// are stored exactly (an int64 keeps every digit, a bool is 0 or 1, a struct is refused).
// Transaction nests a transaction in the turn; DeleteAll empties the object. KV: Get, Put, Delete,
// their batch forms GetMany, PutMany and DeleteMany (MaxBatchKeys), and List with ListOptions (the
// original's prefix, start, startAfter, end, reverse and limit); keys of up to MaxKeyLen bytes,
// values up to MaxValueLen. Size is the database's size. Migrate runs the object's schema steps
// (Migration, SQL) once each, in the constructor's turn, keeping the version in the runtime's own
// table and refusing data newer than the code (ErrSchemaTooNew).
//
// # Concurrency
//
// Runtime, Namespace and Stub are safe for concurrent use. An object's fields are touched only by
// its turns, one at a time: they need no locks. No mailbox goroutine: a call runs its turn on the
// caller's goroutine, and the gate passes from one waiting caller to the next in FIFO order. Under
// contention, while no turn's code runs elsewhere, the turns queued on an object may instead be run
// one after the other by one goroutine holding the gate, each caller woken when its own turn is
// over: the order, each turn's context and outcome are the same (a panic's stack then shows that
// goroutine below the turn's code; a runtime.Goexit still ends the caller's goroutine). A call
// to a full queue (Options.MaxQueue) fails at once with ErrOverloaded (IsRetryable; back off
// first). A context cancelled while the call is queued ends the wait; a running turn is not
// interrupted (its code sees the context and may return). State.BlockConcurrencyWhile keeps the
// gate closed across waits (for initialisation over the network); its failure or timeout
// (BlockConcurrencyTimeout) resets the object (ErrObjectReset).
//
// # Persistence
//
// Each object has its own database, Dir/<namespace>/<id>.sqlite, created on first use of storage.
// Objects idle for Options.IdleTimeout (10 s) are evicted (database closed, instance dropped); the
// next event runs the constructor again, as the first turn, with the gate closed. Past
// Options.MaxOpenObjects open databases, the least recently used idle objects are evicted early.
// Dir/_runtime.sqlite holds the alarm index, the dead letters and the catalog.
//
// # The data directory
//
// One runtime owns a directory: Open takes an OS lock (Dir/_runtime.lock), and a second Open fails
// at once with a *LockedError (ErrLocked) naming the holder's PID. The catalog lists every object
// with a database (Namespace.List, Namespace.All): an object enters it with the commit that creates
// its database. The runtime's file is derived state: missing, empty or damaged, it is rebuilt at
// Open from the objects' own tables (alarms from their timers, dead letters from the copy each
// keeps, the catalog from their identities), the damaged one moved aside. An object the catalog
// knows whose database is missing or empty, or fails SQLite's quick check when first opened, refuses with
// ErrDamaged (a *DamagedError naming the file); Runtime.Quarantine and Runtime.Restore repair it.
// Runtime.Backup writes a consistent copy of a running directory, each object through its gate;
// the copy opens as a directory, an interrupted one is refused with ErrIncompleteBackup.
// Stub.Export writes one object's database to a writer.
//
// A database is WAL with synchronous=FULL by default: a commit is durable once its write-ahead log
// is fsynced. So an evicted object's database closes without a checkpoint (the log is kept, and
// read back at the next activation, as after a crash), except that a log past 128 KiB is
// checkpointed into the database and truncated first: however much an object wrote over its life,
// its close and the reading of its log at the next activation stay short. With synchronous=NORMAL
// the close checkpoints.
//
// # Inspection
//
// Runtime.Namespaces and Runtime.Objects list the catalog, registered namespaces or not.
// Runtime.Inspect (Stub.Inspect) reports an object's tables (TableInfo: columns and row counts,
// the runtime's _durable_* ones marked), its alarm and timers with their retry state (TimerInfo),
// its dead letters and its open WebSockets (tags, attachment). Runtime.Query (Stub.Query) runs
// read-only SQL on its database, at most MaxQueryRows rows (QueryResult): the reads go through a
// connection of their own that cannot write (a read-only file, query_only, an authorizer allowing
// reads only), and a statement that would change anything fails with ErrReadOnly. An object of a
// registered namespace is read in a turn of its own, holding its gate, without running its
// constructor; one of a namespace the runtime has not registered is read from its file (a tool on
// a directory no server holds: cmd/durable). Runtime.Check checks every database and the alarm
// index and returns the Problems it found. Rearm, too, works on a namespace that is not
// registered.
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
// Options.Replication makes the runtime one node of a cluster (see Replication, Log, Leases;
// package cluster fills them with NATS JetStream). Each object's commits are records in its own
// log: at the batch's commit, after SQLite's local COMMIT and before any output or result leaves,
// the pages the commit appended to the WAL (read by core/internal/walship, deflated, about 250
// bytes for a counter increment) are appended with the log's last sequence as the expected one,
// so one record serves a group commit, and an append another writer beat is refused. One node at a
// time serves an object, under a lease it renews every quarter LeaseTTL: another node's call fails
// at once with ErrNotOwner (a *NotOwnerError naming the holder) until that node has seen the lease
// unrenewed for LeaseTTL by its own clock, then takes it over, replays the log into its own
// directory, and appends an epoch record that fences the old owner (ErrFenced at its next commit;
// nothing of that batch is released). A turn whose lease cannot be proven valid is refused
// (ErrLeaseUnproven), so no node serves a state another may have moved on from. Local files are a
// cache: each commit records its place in the log, a file ahead of the log is rebuilt from it, and
// any node rebuilds any object from its latest snapshot (every SnapshotEvery records) and the
// records after it. Eviction and Close hand leases back, so another node takes over at once. An
// append whose outcome is unknown is resolved by reading the log's head, or fails with
// ErrCommitUnknown. Facets, Restore and Quarantine are refused in cluster mode; an object's alarm
// runs on its owner, and the alarm of an object whose owner died fires when another node next
// activates it. replogtest.MemCluster is an in-memory engine for tests, with faults to inject.
// Without Options.Replication the runtime is the single-process one, unchanged.
//
// # Errors
//
// Errors from Call are *Error values naming the object. The object's own errors (returned or
// panicked) are wrapped in *RemoteError (IsRemote); ErrOverloaded and ErrCommitFailed are retryable
// (IsRetryable); ErrClosed means the runtime is closing; ErrSQLNotAllowed refuses SQL taking over
// the runtime's transactions, files or tables (TEMP objects of its names and triggers on its tables
// included); ErrDamaged refuses an object whose database is damaged.
//
// # Shutdown
//
// Runtime.Shutdown stops new calls, cancels the runtime's base context (the Done of turns, Await's
// functions, alarm runs and WebSocket deliveries end with it), waits until what runs has finished
// or its ctx ends, and reports what it abandoned. Close is Shutdown bounded by CloseTimeout.
//
// # Caveats
//
//   - A call from inside a turn must be given the turn's context: with another one the caller's
//     gate stays closed while it waits. When such a chain comes back to a busy gate through a
//     turn that passes its own context, the runtime finds the hidden caller on the goroutine's
//     stack and refuses with ErrDeadlock; a call made with another context straight back to the
//     calling object itself cannot be told from an outside caller, and waits for ever.
//   - A turn failing after an Await rolls back only what follows it: Await commits the turn so far.
//   - A failing alarm run keeps none of its writes (the original keeps them): commit an attempt
//     log with an Await before the work that may fail. The project's SEMANTICS.md lists every
//     deliberate difference from the original in one place.
package core
