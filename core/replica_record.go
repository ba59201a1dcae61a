package core

import (
	"bytes"
	"compress/flate"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/durable-go/durable/core/internal/walship"
)

// A log record, as the runtime appends it to an object's log:
//
//	[0]      version (1)
//	[1]      kind: recCommit, recEpoch, recSnapshot
//	[2]      flags: recMore (more parts of this record follow), recFlate (the payload is deflated)
//	[3]      reserved (0)
//	[4:8]    part number, from 0
//	[8:16]   the writer's epoch
//	[16:32]  batch id (random; the same in every part)
//	[32:40]  the previous record's checksum
//	[40:48]  this record's checksum: the first 8 bytes of SHA-256 over [0:40] and the payload
//	[48:]    payload
//
// A commit's payload is its pages (encodeCommit), deflated when that is smaller, split into parts
// that each fit MaxRecordBytes; replay applies a commit once its last part (without recMore) is
// read. An epoch record's payload is the node's name. A snapshot record's payload names the blob
// that holds the database file, its size and SHA-256, and the batch of the last commit it holds.
const (
	recVersion    = 1
	recHeaderSize = 48

	recCommit   = 1
	recEpoch    = 2
	recSnapshot = 3

	recMore  = 1 << 0
	recFlate = 1 << 1
)

// MaxRecordBytes bounds one log record. A commit whose pages (compressed) are larger is appended as
// several records, the last of which completes it.
const MaxRecordBytes = 1 << 20

type batchID [16]byte

func newBatchID() batchID {
	var id batchID
	rand.Read(id[:])
	return id
}

// record is a decoded log record.
type record struct {
	kind    byte
	flags   byte
	part    uint32
	epoch   uint64
	batch   batchID
	prev    uint64
	sum     uint64
	payload []byte
}

func (r *record) more() bool { return r.flags&recMore != 0 }

// encode lays r out, computing its checksum from r.prev.
func (r *record) encode() []byte {
	b := make([]byte, recHeaderSize+len(r.payload))
	b[0], b[1], b[2] = recVersion, r.kind, r.flags
	binary.BigEndian.PutUint32(b[4:], r.part)
	binary.BigEndian.PutUint64(b[8:], r.epoch)
	copy(b[16:32], r.batch[:])
	binary.BigEndian.PutUint64(b[32:], r.prev)
	copy(b[recHeaderSize:], r.payload)
	r.sum = recordSum(b)
	binary.BigEndian.PutUint64(b[40:], r.sum)
	return b
}

func recordSum(b []byte) uint64 {
	h := sha256.New()
	h.Write(b[:40])
	h.Write(b[recHeaderSize:])
	return binary.BigEndian.Uint64(h.Sum(nil))
}

var errBadRecord = errors.New("core: log record damaged")

func decodeRecord(b []byte) (*record, error) {
	if len(b) < recHeaderSize || b[0] != recVersion {
		return nil, fmt.Errorf("%w: %d bytes, version %d", errBadRecord, len(b), firstByte(b))
	}
	r := &record{kind: b[1], flags: b[2], part: binary.BigEndian.Uint32(b[4:]), epoch: binary.BigEndian.Uint64(b[8:]),
		prev: binary.BigEndian.Uint64(b[32:]), sum: binary.BigEndian.Uint64(b[40:]), payload: b[recHeaderSize:]}
	copy(r.batch[:], b[16:32])
	if recordSum(b) != r.sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadRecord)
	}
	return r, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// encodeCommit lays out a commit's pages: page size, database size in pages, page count, then each
// page's number and image.
func encodeCommit(c *walship.Commit) []byte {
	b := make([]byte, 12, 12+len(c.Pages)*(4+c.PageSize))
	binary.BigEndian.PutUint32(b[0:], uint32(c.PageSize))
	binary.BigEndian.PutUint32(b[4:], c.DBPages)
	binary.BigEndian.PutUint32(b[8:], uint32(len(c.Pages)))
	for _, p := range c.Pages {
		b = binary.BigEndian.AppendUint32(b, p.No)
		b = append(b, p.Data...)
	}
	return b
}

func decodeCommit(b []byte) (*walship.Commit, error) {
	if len(b) < 12 {
		return nil, fmt.Errorf("%w: commit of %d bytes", errBadRecord, len(b))
	}
	c := &walship.Commit{PageSize: int(binary.BigEndian.Uint32(b[0:])), DBPages: binary.BigEndian.Uint32(b[4:])}
	n := int(binary.BigEndian.Uint32(b[8:]))
	b = b[12:]
	if c.PageSize < 512 || c.PageSize > 65536 || len(b) != n*(4+c.PageSize) {
		return nil, fmt.Errorf("%w: %d pages of %d bytes in %d bytes", errBadRecord, n, c.PageSize, len(b))
	}
	for range n {
		c.Pages = append(c.Pages, walship.Page{No: binary.BigEndian.Uint32(b), Data: b[4 : 4+c.PageSize]})
		b = b[4+c.PageSize:]
	}
	return c, nil
}

var flaters = sync.Pool{New: func() any { w, _ := flate.NewWriter(nil, flate.BestSpeed); return w }}

// pack deflates a commit's payload when that makes it smaller.
func pack(raw []byte) (payload []byte, flags byte) {
	var buf bytes.Buffer
	w := flaters.Get().(*flate.Writer)
	w.Reset(&buf)
	_, err := w.Write(raw)
	if err == nil {
		err = w.Close()
	}
	flaters.Put(w)
	if err != nil || buf.Len() >= len(raw) {
		return raw, 0
	}
	return buf.Bytes(), recFlate
}

// unpack returns a commit's payload as encodeCommit laid it out, in buf (reused) if it was deflated.
func unpack(payload []byte, flags byte, buf *bytes.Buffer) ([]byte, error) {
	if flags&recFlate == 0 {
		return payload, nil
	}
	r, _ := inflaters.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReader(bytes.NewReader(payload))
	} else {
		r.(flate.Resetter).Reset(bytes.NewReader(payload), nil)
	}
	defer inflaters.Put(r)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRecord, err)
	}
	return buf.Bytes(), nil
}

var inflaters sync.Pool

// commitRecords makes the records of one commit, chained from prev: one, or several parts of at
// most MaxRecordBytes.
func commitRecords(c *walship.Commit, epoch uint64, batch batchID, prev uint64) [][]byte {
	payload, flags := pack(encodeCommit(c))
	const room = MaxRecordBytes - recHeaderSize
	var out [][]byte
	for part := uint32(0); ; part++ {
		n := min(len(payload), room)
		r := record{kind: recCommit, flags: flags, part: part, epoch: epoch, batch: batch, prev: prev, payload: payload[:n]}
		payload = payload[n:]
		if len(payload) > 0 {
			r.flags |= recMore
		}
		out = append(out, r.encode())
		prev = r.sum
		if len(payload) == 0 {
			return out
		}
	}
}

// snapshotInfo is a snapshot record's payload.
type snapshotInfo struct {
	Blob   string // the blob holding the database file
	Size   int64  // its size
	SHA256 [32]byte
	Batch  batchID // the batch of the last commit the file holds
}

func (s *snapshotInfo) encode() []byte {
	b := make([]byte, 0, 8+32+16+len(s.Blob))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Size))
	b = append(b, s.SHA256[:]...)
	b = append(b, s.Batch[:]...)
	return append(b, s.Blob...)
}

func decodeSnapshot(b []byte) (*snapshotInfo, error) {
	if len(b) < 8+32+16+1 {
		return nil, fmt.Errorf("%w: snapshot record of %d bytes", errBadRecord, len(b))
	}
	s := &snapshotInfo{Size: int64(binary.BigEndian.Uint64(b))}
	copy(s.SHA256[:], b[8:40])
	copy(s.Batch[:], b[40:56])
	s.Blob = string(b[56:])
	return s, nil
}
