// Package replog is the contract between the durable runtime in cluster mode and the engine that
// replicates it: a Log of records per key with expected-sequence appends, and Leases, a key-value
// map with compare-and-set. The runtime needs nothing else of an engine, and an engine needs
// nothing of the runtime: package cluster fills both with NATS JetStream, and package replogtest
// has an in-memory engine and the suites that check an engine against this contract.
//
// The runtime's keys are a namespace, '/', and an object name: at most MaxKeyLen bytes of any
// characters. Its records are at most MaxRecordBytes long.
package replog

import (
	"context"
	"errors"
	"io"

	"github.com/durable-go/durable/internal/logrecord"
)

// A Log keeps an ordered, replicated list of records per key (one key per object). A record is
// durable on the engine's quorum once Append returns it a sequence. Sequences grow along a key's
// records; they need not be dense, and may be shared across keys.
type Log interface {
	// Append adds rec as key's last record if key's last record is at sequence expect (0: key has
	// no record), and returns the new record's sequence. If key's last record is elsewhere, it fails
	// with an error that matches ErrConflict and appends nothing. If the outcome is not known (a
	// timeout, a lost connection), it fails with an error that matches ErrUnknown: the record may
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
	// and fails with an error that matches ErrNoBlob if there is none; DeleteBlob removes it.
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

// Errors an engine returns, wrapped in its own as it likes: the runtime tells them apart with
// errors.Is.
var (
	// ErrConflict is returned by Log.Append when the key's last record is not the one expected:
	// another writer appended.
	ErrConflict = errors.New("replog: the last record moved")
	// ErrUnknown is returned by Log.Append when the record may or may not have been appended.
	ErrUnknown = errors.New("replog: append outcome unknown")
	// ErrNoBlob is returned by Log.GetBlob for a name that holds no blob.
	ErrNoBlob = errors.New("replog: no such blob")
	// ErrLeaseConflict is returned by Leases.Put and Leases.Delete when the key's revision moved.
	ErrLeaseConflict = errors.New("replog: lease revision moved")
)

// MaxKeyLen bounds the keys the runtime uses: a namespace of up to 64 bytes, '/', and an object
// name of up to 1,024 bytes (core.MaxNameLen). An engine must take every such key.
const MaxKeyLen = 64 + 1 + 1024

// MaxRecordBytes bounds one record the runtime appends. A commit whose pages (compressed) are
// larger is appended as several records, the last of which completes it.
const MaxRecordBytes = logrecord.MaxBytes

// RecordEpoch returns the writer's epoch that a record of an object's log carries (a commit, the
// epoch opened by a node taking the object over, or a snapshot), after checking the record's
// checksum; a record the runtime did not write, or a damaged one, is an error. Epochs never
// decrease along an object's log, so a tool that reads the log through the engine (Log.Read) can
// check that no former owner appended after a takeover.
func RecordEpoch(rec []byte) (uint64, error) {
	r, err := logrecord.Decode(rec)
	if err != nil {
		return 0, err
	}
	return r.Epoch, nil
}
