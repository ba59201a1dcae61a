package core

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/durable-go/durable/core/internal/replica"
)

// Errors returned by the runtime. Test for them with errors.Is; IsRetryable says whether a call may be
// tried again, and errors.As with a *RemoteError whether the object's own code raised the error.
var (
	// ErrClosed is returned by calls on a closed runtime, and by calls still queued at Close.
	ErrClosed = errors.New("core: runtime closed")
	// ErrOverloaded is returned at once on a full object queue (Options.MaxQueue): back off, retry.
	ErrOverloaded = errors.New("core: object overloaded")
	// ErrInvalidName is returned for an object name that is empty, longer than MaxNameLen bytes, or
	// not valid UTF-8, and for a namespace name that is not a plain identifier.
	ErrInvalidName = errors.New("core: invalid name")
	// ErrCommitFailed is returned when the commit that holds a turn's writes could not be made
	// durable. The turn's writes are lost (never half applied); the call is retryable.
	ErrCommitFailed = errors.New("core: commit failed")
	// ErrNotInTurn is returned when storage, Await or the alarm methods are used outside a turn of
	// the object, from a goroutine it started, say.
	ErrNotInTurn = errors.New("core: not inside a turn of this object")
	// ErrSQLNotAllowed is returned for SQL that would take control of the runtime's transactions or
	// files: BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ATTACH, DETACH, PRAGMAs that change
	// settings, and writes to the runtime's tables (_durable_*); nest with Storage.Transaction.
	ErrSQLNotAllowed = errors.New("core: sql statement not allowed")
	// ErrNoRows is returned by Row.Scan when the query selected no row (from Storage.One, it says "no
	// results"). It also matches database/sql's sql.ErrNoRows.
	ErrNoRows error = &alsoErr{"core: no rows in result set", []error{sql.ErrNoRows}}
	// ErrMultipleResults is returned by the Row.Scan of Storage.One when the query returned more
	// than one row.
	ErrMultipleResults = errors.New("core: exactly one row expected: multiple results")
	// ErrNoStatement is returned by Exec and Query for a query that holds no statement: empty, or
	// only white space, comments and semicolons.
	ErrNoStatement = errors.New("core: sql: the query holds no statement")
	// ErrArgCount is returned by Exec and Query when the arguments given are more or fewer than the
	// statement's parameters; none is ever ignored.
	ErrArgCount = errors.New("core: sql: wrong number of arguments")
	// ErrInvalidArgument is returned for a value a method does not accept: an alarm time at or
	// before the Unix epoch, list options that contradict each other, a batch of too many keys.
	ErrInvalidArgument = errors.New("core: invalid argument")
	// ErrObjectReset is returned by State.BlockConcurrencyWhile whose function failed or ran over
	// BlockConcurrencyTimeout, and fails the turn it ran in: the object was reset (its instance is
	// dropped, and the constructor runs again for the next call).
	ErrObjectReset = errors.New("core: object reset: BlockConcurrencyWhile failed")
	// ErrSchemaTooNew is returned by Storage.Migrate when the object's stored schema version is
	// newer than the steps the code knows: the data was written by a later version of the code.
	ErrSchemaTooNew = errors.New("core: stored schema is newer than the code's migrations")
	// ErrDeadlock is returned at once by a call, TriggerAlarm or other operation that would wait
	// for a gate held by a turn waiting, directly or through other objects, for the caller.
	ErrDeadlock = errors.New("core: deadlock: the object's gate is held by a turn waiting for this caller")
	// ErrTooLarge is returned when a value is over a documented size limit.
	ErrTooLarge = errors.New("core: value too large")
	// ErrWebSocketClosed is returned by *WebSocket methods once the connection is closing.
	ErrWebSocketClosed = errors.New("core: websocket closed")
	// ErrSlowClient is the cause reported to WebSocketError when a client did not read fast enough:
	// Options.WebSocketSendQueue messages were waiting for it. The connection was closed with 1013.
	ErrSlowClient = errors.New("core: websocket client too slow: send queue full")
	// ErrInvalidText is the cause reported to WebSocketError when a client sent a text message that
	// is not valid UTF-8. The message was not delivered, and the connection was closed with 1007.
	ErrInvalidText = errors.New("core: websocket text message is not valid UTF-8")
	// ErrBadHandshake is returned by AcceptWebSocket when the request is not a valid WebSocket
	// upgrade or its Origin is not allowed; the HTTP error response has been written to w.
	ErrBadHandshake = errors.New("core: websocket handshake failed")
	// ErrLocked is returned by Open when another runtime holds the data directory (see
	// LockedError, which names the holder's PID).
	ErrLocked = errors.New("core: data directory in use")
	// ErrDamaged is returned for an object whose database is missing or empty although the
	// runtime's catalog knows it, has a damaged header, a page SQLite finds corrupt as it reads
	// it, or fails SQLite's quick check, which runs in the background after the file's first open
	// (see DamagedError, which names the file). The object refuses to serve until it is restored or quarantined
	// (Admin.Quarantine); other objects keep serving.
	ErrDamaged = errors.New("core: object database damaged")
	// ErrIncompleteBackup is returned by Open for a directory that a backup was writing and did
	// not finish (Admin.Backup): it is not a copy of anything.
	ErrIncompleteBackup = errors.New("core: incomplete backup")
	// ErrReadOnly is returned by Admin.Query for a statement that would change anything (a write, DDL, ATTACH, a transaction, a PRAGMA): inspection reads only.
	ErrReadOnly = errors.New("core: inspection is read-only")
	// ErrNoObject is returned by Admin's methods for an object the catalog does not list: there is no
	// such object (it has no storage).
	ErrNoObject = errors.New("core: no such object")
	// ErrClusterMode is returned in cluster mode (Options.Replication) by what it does not offer:
	// Admin.Restore and Admin.Quarantine, which replace an object's file outside its turns (there
	// the object's log is its truth, and its local file a cache).
	ErrClusterMode = errors.New("core: not available in cluster mode")
	// ErrNotOwner is returned at once, in cluster mode (Options.Replication), by a call or alarm run
	// on an object whose lease another node holds and renews (see NotOwnerError, which names it):
	// send the call to that node. It is never served here meanwhile.
	ErrNotOwner = errors.New("core: another node owns the object")
	// ErrFenced is returned, in cluster mode, when another node took the object over while this one
	// served it: the turn's commit was refused by the log (another writer appended) or the lease was
	// found taken. Nothing of the batch was acknowledged or released; the object's local file is
	// discarded. It is not retryable on this node: the object now lives on the other one.
	ErrFenced = replica.ErrFenced
	// ErrLeaseUnproven is returned, in cluster mode, for a turn on an object whose lease this node
	// cannot prove valid now (the leases could not be reached to renew it, in time): the turn is
	// refused rather than served from a state that another node may have moved on from. Retry later.
	ErrLeaseUnproven = replica.ErrLeaseUnproven
	// ErrCommitUnknown is returned, in cluster mode, when a commit's record was sent to the log but
	// the log could not say, after retries, whether it holds it: the turn's writes may or may not be
	// durable. Nothing was acknowledged; the next activation reads the log to learn which.
	ErrCommitUnknown = replica.ErrCommitUnknown
	// ErrUnreachable is returned, in cluster mode with Replication.Calls, by a Method's call (or a
	// relayed HTTP request) that could not be delivered to the node owning the object within
	// Replication.CallAttempts: the link is cut, or the node is gone. The call did not run anywhere;
	// it is retryable. A call that was delivered but not answered may have run: it is sent again to
	// that node alone, with the same request id (which runs it at most once), and if that node
	// cannot be asked again the call fails with ErrCommitUnknown instead, which is not retryable.
	ErrUnreachable = errors.New("core: the object's node cannot be reached")
	// ErrNoMethod is returned by a Method's call sent to a node that has not defined the method
	// (Define) for the namespace, or has not registered the namespace.
	ErrNoMethod = errors.New("core: no such method")
)

// alsoErr is a sentinel that also matches other sentinels.
type alsoErr struct {
	msg  string
	also []error
}

func (e *alsoErr) Error() string   { return e.msg }
func (e *alsoErr) Unwrap() []error { return e.also }

// Error describes a failed operation on one object. Every error from Call and from the runtime's
// operations on an object is an *Error, so the object is always named; Unwrap gives the cause.
type Error struct {
	Op              string // "call", "construct", "commit", "alarm", ...
	Namespace, Name string
	Err             error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s/%q: %v", e.Op, e.Namespace, e.Name, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// DamagedError is the cause of an ErrDamaged: the object's database file and what is wrong with it.
type DamagedError struct {
	Path   string // the database file
	Reason string // "missing", "empty (0 bytes)", a header's finding, the quick check's first, ...
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("core: object database %s is damaged: %s", e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// NotOwnerError is the cause of an ErrNotOwner: the object's lease key, the node that holds it and
// where that node's callers reach it.
type NotOwnerError struct {
	Key     string    // the object's lease key ("namespace/name")
	Holder  string    // the holding node's Options.Replication.Node
	Address string    // the holder's Replication.Advertise, as its beats say; "" if unknown
	Until   time.Time // by this node's clock, the earliest time it may take the object over if unrenewed

	own bool // Holder is this node's own name: a lease its process held before a restart
}

func (e *NotOwnerError) Error() string {
	if e.own {
		return fmt.Sprintf("core: %s is held by node %q's lease from before its restart: this node takes it over once it lapses, at %s",
			e.Key, e.Holder, e.Until.Format(time.RFC3339Nano))
	}
	if e.Address != "" {
		return fmt.Sprintf("core: %s is owned by node %q at %s", e.Key, e.Holder, e.Address)
	}
	return fmt.Sprintf("core: %s is owned by node %q", e.Key, e.Holder)
}

// Is makes errors.Is(err, ErrNotOwner) true.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// RemoteError wraps an error raised by the object's own code (a returned error or a panic), not the
// runtime: errors.As(err, new(*RemoteError)) tells them apart. Its turn was rolled back; retry only if
// the object's method is safe to retry.
type RemoteError struct{ Err error }

func (e *RemoteError) Error() string { return e.Err.Error() }
func (e *RemoteError) Unwrap() error { return e.Err }

// PanicError is the cause of a RemoteError when the object's code panicked. The panic is recovered
// (the object keeps serving): the turn is rolled back and the caller receives value and stack.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("core: panic in object code: %v", e.Value) }

// IsRetryable reports whether err is a transient runtime fault after which the same call may be
// retried with backoff: ErrOverloaded, ErrCommitFailed, ErrLeaseUnproven or ErrUnreachable. Errors of the
// object's own code are not.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrOverloaded) || errors.Is(err, ErrCommitFailed) || errors.Is(err, ErrLeaseUnproven) ||
		errors.Is(err, ErrUnreachable)
}
