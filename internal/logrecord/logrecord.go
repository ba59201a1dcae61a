// Package logrecord is the envelope of the records the runtime appends to an object's log in
// cluster mode: a fixed header (kind, flags, part, the writer's epoch, batch id, the previous
// record's checksum and its own) before a payload. What a payload holds is the runtime's business;
// this package only lays records out and checks them, so that tools outside the runtime
// (replog.RecordEpoch) read them the same way.
//
//	[0]      version (1)
//	[1]      kind: Commit, Epoch, Snapshot
//	[2]      flags: More (more parts of this record follow), Flate (the payload is deflated),
//	         Tagged (the payload names the databases it is for: a facet's, or several)
//	[3]      reserved (0)
//	[4:8]    part number, from 0
//	[8:16]   the writer's epoch
//	[16:32]  batch id (random; the same in every part)
//	[32:40]  the previous record's checksum
//	[40:48]  this record's checksum: the first 8 bytes of SHA-256 over [0:40] and the payload
//	[48:]    payload
package logrecord

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	version = 1

	// HeaderSize is the size of a record's header, before its payload.
	HeaderSize = 48

	// MaxBytes bounds one record, header included.
	MaxBytes = 1 << 20
)

// A record's kinds.
const (
	Commit   = 1 // a commit's pages, or a part of them
	Epoch    = 2 // a node took the object over: its payload is the node's name
	Snapshot = 3 // the database file is in a blob: its payload names it
)

// A record's flags.
const (
	More  = 1 << 0 // more parts of this record follow
	Flate = 1 << 1 // the payload is deflated
	// Tagged says the payload names the databases it is for: a commit of a facet's database (or one
	// that drops facets), a snapshot of an object with facets. Without it, a record is the object's
	// own database's.
	Tagged = 1 << 2
)

// BatchID names one commit (one group-commit batch) in every record it takes.
type BatchID [16]byte

// NewBatchID returns a random batch id.
func NewBatchID() BatchID {
	var id BatchID
	rand.Read(id[:])
	return id
}

// Record is a decoded record.
type Record struct {
	Kind    byte
	Flags   byte
	Part    uint32
	Epoch   uint64
	Batch   BatchID
	Prev    uint64 // the previous record's checksum
	Sum     uint64 // this record's checksum, set by Encode
	Payload []byte
}

// HasMore reports whether more parts of the record follow.
func (r *Record) HasMore() bool { return r.Flags&More != 0 }

// Encode lays r out, computing its checksum (r.Sum) from r.Prev and the rest.
func (r *Record) Encode() []byte {
	b := make([]byte, HeaderSize+len(r.Payload))
	b[0], b[1], b[2] = version, r.Kind, r.Flags
	binary.BigEndian.PutUint32(b[4:], r.Part)
	binary.BigEndian.PutUint64(b[8:], r.Epoch)
	copy(b[16:32], r.Batch[:])
	binary.BigEndian.PutUint64(b[32:], r.Prev)
	copy(b[HeaderSize:], r.Payload)
	r.Sum = sum(b)
	binary.BigEndian.PutUint64(b[40:], r.Sum)
	return b
}

func sum(b []byte) uint64 {
	h := sha256.New()
	h.Write(b[:40])
	h.Write(b[HeaderSize:])
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// ErrBad is returned for a record that is damaged, or that the runtime did not write.
var ErrBad = errors.New("core: log record damaged")

// Decode checks b's version and checksum and returns its record; the payload is a slice of b.
func Decode(b []byte) (*Record, error) {
	if len(b) < HeaderSize || b[0] != version {
		return nil, fmt.Errorf("%w: %d bytes, version %d", ErrBad, len(b), firstByte(b))
	}
	r := &Record{Kind: b[1], Flags: b[2], Part: binary.BigEndian.Uint32(b[4:]), Epoch: binary.BigEndian.Uint64(b[8:]),
		Prev: binary.BigEndian.Uint64(b[32:]), Sum: binary.BigEndian.Uint64(b[40:]), Payload: b[HeaderSize:]}
	copy(r.Batch[:], b[16:32])
	if sum(b) != r.Sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBad)
	}
	return r, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}
