// Package replog is the contract between the durable runtime in cluster mode and the engine that
// replicates it: a Log of records per key with expected-sequence appends, spread over a fixed
// number of shards; Leases, one compare-and-set value per shard; a Beacon that carries the
// nodes' heartbeats; and, optionally, Calls, which carries requests from node to node, so that a
// call made at any node reaches the object's owner. The runtime needs nothing else of an engine,
// and an engine needs nothing of the runtime: package cluster fills all four with NATS JetStream
// and NATS request-reply, and package replogtest has an in-memory engine and the suites that check
// an engine against this contract.
//
// A shard is the unit of ownership and of failure: a node owns all of a shard's objects or none,
// under the shard's lease, and an engine keeps a shard's records, blobs and lease together (in
// JetStream, one stream: one raft group), so that losing the leader of one shard's group stalls
// that shard's objects and no others.
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
	// Shards is how many shards the keys are spread over, fixed for the life of the data.
	Shards() int

	// ShardOf returns key's shard, in [0, Shards()): always the same for the same key.
	ShardOf(key string) int

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

	// PutBlob stores a large value (a snapshot of key's object) under name, replacing any, in
	// key's shard; GetBlob writes it to w and fails with an error that matches ErrNoBlob if there
	// is none; DeleteBlob removes it. Names are unique across keys.
	PutBlob(ctx context.Context, key, name string, r io.Reader) error
	GetBlob(ctx context.Context, key, name string, w io.Writer) error
	DeleteBlob(ctx context.Context, key, name string) error
}

// Leases is one replicated value per shard with compare-and-set, where the runtime keeps each
// shard's owner. A shard's revisions grow with every change and are never reused for it. Get is
// linearizable: it never returns a value older than one whose Put has returned.
type Leases interface {
	// Get returns shard's value and revision; 0 and nil if it has none.
	Get(ctx context.Context, shard int) (rev uint64, value []byte, err error)

	// Put sets shard's value if its revision is rev (0: it must have none), and returns the new
	// revision. If the revision differs it fails with an error that matches ErrLeaseConflict.
	Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error)

	// Delete removes shard's value if its revision is rev; otherwise it fails with an error that
	// matches ErrLeaseConflict.
	Delete(ctx context.Context, shard int, rev uint64) error
}

// Beacon carries the nodes' heartbeats: small messages, neither stored nor replicated, that every
// node listening receives (its sender too), at most once each and usually within milliseconds. The
// runtime uses them to know which nodes are alive, never to decide who may write: that is the
// leases' work. A Beacon must not depend on the replicated layer (no leader, no quorum): a node
// that lost its quorum still beats and hears the others.
type Beacon interface {
	// Beat sends msg, at most MaxBeatBytes long, to every node's listeners.
	Beat(ctx context.Context, msg []byte) error

	// Listen calls fn with every beat received, one call at a time, until stop is called; stop
	// returns once no call of fn is under way or will begin.
	Listen(fn func(msg []byte)) (stop func(), err error)
}

// MaxBeatBytes bounds one heartbeat.
const MaxBeatBytes = 16 << 10

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
	// ErrLeaseConflict is returned by Leases.Put and Leases.Delete when the shard's revision moved.
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
