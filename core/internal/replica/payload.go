package replica

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/durable-go/durable/core/internal/walship"
	"github.com/durable-go/durable/internal/logrecord"
)

// The payloads of the records (package logrecord lays out their envelope). A commit's payload is
// its pages (encodeCommit), deflated when that is smaller, split into parts that each fit
// logrecord.MaxBytes; replay applies a commit once its last part (without logrecord.More) is read.
// An epoch record's payload is the node's name. A snapshot record's payload names the blob that
// holds the database file, its size and SHA-256, and the batch of the last commit it holds.

var errBadRecord = logrecord.ErrBad

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
	return buf.Bytes(), logrecord.Flate
}

// unpack returns a commit's payload as encodeCommit laid it out, in buf (reused) if it was deflated.
func unpack(payload []byte, flags byte, buf *bytes.Buffer) ([]byte, error) {
	if flags&logrecord.Flate == 0 {
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
		return nil, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	return buf.Bytes(), nil
}

var inflaters sync.Pool

// commitRecords makes the records of one commit, chained from prev: one, or several parts of at
// most logrecord.MaxBytes.
func commitRecords(c *walship.Commit, epoch uint64, batch logrecord.BatchID, prev uint64) [][]byte {
	payload, flags := pack(encodeCommit(c))
	const room = logrecord.MaxBytes - logrecord.HeaderSize
	var out [][]byte
	for part := uint32(0); ; part++ {
		n := min(len(payload), room)
		r := logrecord.Record{Kind: logrecord.Commit, Flags: flags, Part: part, Epoch: epoch, Batch: batch, Prev: prev, Payload: payload[:n]}
		payload = payload[n:]
		if len(payload) > 0 {
			r.Flags |= logrecord.More
		}
		out = append(out, r.Encode())
		prev = r.Sum
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
	Batch  logrecord.BatchID // the batch of the last commit the file holds
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
