package core

import (
	"context"
	"errors"
	"io"
	"time"
)

// Replication makes a runtime one node of a cluster: every object's commits are records in a
// replicated log, shipped before the commit's output is released, and one node at a time owns an
// object, under a lease. Set Options.Replication to use it; nil (the default) is the
// single-process runtime, unchanged.
//
// The runtime needs only the two narrow interfaces below from the engine that replicates; package
// cluster fills them with NATS JetStream (embedded or external). Another engine can fill them too:
// the runtime relies on nothing but what their documentation says.
type Replication struct {
	// Node names this node among the cluster's (required, unique). It is the lease holder's name.
	Node string

	// Log keeps each object's commit records.
	Log Log

	// Leases keeps each object's owner.
	Leases Leases

	// LeaseTTL is how long a lease lasts unrenewed (default 4 s). A node serves an object only while
	// its lease is valid by the node's own clock; another node takes an object over only after it
	// has seen the lease unrenewed for LeaseTTL by its own clock. Failover takes about this long.
	LeaseTTL time.Duration

	// SnapshotEvery is how many commit records an object's log may hold before the owner writes a
	// snapshot and trims the records before it (default 1000).
	SnapshotEvery int
}

// A Log keeps an ordered, replicated list of records per key (one key per object). A record is
// durable on the engine's quorum once Append returns it a sequence. Sequences grow along a key's
// records; they need not be dense, and may be shared across keys.
type Log interface {
	// Append adds rec as key's last record if key's last record is at sequence expect (0: key has
	// no record), and returns the new record's sequence. If key's last record is elsewhere, it fails
	// with an error that matches ErrLogConflict and appends nothing. If the outcome is not known (a
	// timeout, a lost connection), it fails with an error that matches ErrLogUnknown: the record may
	// or may not be there.
	Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error)

	// Last returns key's last record and its sequence; 0 and nil if key has none.
	Last(ctx context.Context, key string) (seq uint64, rec []byte, err error)

	// Read calls fn with each of key's records after sequence after, in order, up to the last
	// record there was when Read began, and stops at fn's first error, which it returns.
	Read(ctx context.Context, key string, after uint64, fn func(seq uint64, rec []byte) error) error

	// Trim removes key's records before sequence before.
	Trim(ctx context.Context, key string, before uint64) error

	// PutBlob stores a large value (a snapshot) under name, replacing any; GetBlob writes it to w
	// and fails with an error that matches ErrNoObject if there is none; DeleteBlob removes it.
	PutBlob(ctx context.Context, name string, r io.Reader) error
	GetBlob(ctx context.Context, name string, w io.Writer) error
	DeleteBlob(ctx context.Context, name string) error
}

// Leases is a replicated key-value map with compare-and-set, where the runtime keeps each object's
// owner. Revisions grow with every change of a key and are never reused for it.
type Leases interface {
	// Get returns key's value and revision; 0 and nil if key has none.
	Get(ctx context.Context, key string) (rev uint64, value []byte, err error)

	// Put sets key to value if key's revision is rev (0: key must not exist), and returns the new
	// revision. If the revision differs it fails with an error that matches ErrLeaseConflict.
	Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)

	// Delete removes key if its revision is rev; otherwise it fails with an error that matches
	// ErrLeaseConflict.
	Delete(ctx context.Context, key string, rev uint64) error
}

// Errors of cluster mode.
var (
	// ErrLogConflict is returned by Log.Append when the key's last record is not the one expected:
	// another writer appended.
	ErrLogConflict = errors.New("core: log: the last record moved")
	// ErrLogUnknown is returned by Log.Append when the record may or may not have been appended.
	ErrLogUnknown = errors.New("core: log: append outcome unknown")
	// ErrLeaseConflict is returned by Leases.Put and Leases.Delete when the key's revision moved.
	ErrLeaseConflict = errors.New("core: lease: revision moved")
)
