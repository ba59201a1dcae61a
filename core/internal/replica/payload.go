package replica

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/durable-go/durable/core/internal/walship"
	"github.com/durable-go/durable/internal/logrecord"
)

// The payloads of the records (package logrecord lays out their envelope). A commit's payload is
// its pages (encodeCommit), deflated when that is smaller, split into parts that each fit
// logrecord.MaxBytes; replay applies a commit once its last part (without logrecord.More) is read.
// An epoch record's payload is the node's name. A snapshot record's payload names the blob that
// holds the database file, its size and SHA-256, and the batch of the last commit it holds.
//
// An object's facets write in its log (facets.go). A record flagged logrecord.Tagged names the
// databases it is for: a commit's payload (before deflating) begins with a commitHead (the database,
// the facet directories the commit drops); a snapshot's lists one snapshotInfo per database.

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

// commitHead is what a tagged commit says before its pages: the database it is for (a facet's, by
// its path below the object's facets directory; "" for the object's own), and the facet directories
// its batch deleted (DeleteAll), below which every database is empty from this commit on.
type commitHead struct {
	DB    string
	Drops []string
}

func (h commitHead) tagged() bool { return h.DB != "" || len(h.Drops) > 0 }

// drops reports whether the commit empties database db.
func (h commitHead) drops(db string) bool {
	for _, d := range h.Drops {
		if db != "" && strings.HasPrefix(db, d) {
			return true
		}
	}
	return false
}

func (h commitHead) encode(b []byte) []byte {
	b = appendString(b, h.DB)
	b = binary.AppendUvarint(b, uint64(len(h.Drops)))
	for _, d := range h.Drops {
		b = appendString(b, d)
	}
	return b
}

func decodeHead(b []byte) (h commitHead, rest []byte, err error) {
	if h.DB, b, err = readString(b); err != nil {
		return h, nil, err
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return h, nil, fmt.Errorf("%w: commit head", errBadRecord)
	}
	b = b[k:]
	for range n {
		var d string
		if d, b, err = readString(b); err != nil {
			return h, nil, err
		}
		h.Drops = append(h.Drops, d)
	}
	return h, b, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func readString(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, fmt.Errorf("%w: a name in a tagged record", errBadRecord)
	}
	return string(b[k : k+int(n)]), b[k+int(n):], nil
}

// commitRecords makes the records of one commit, chained from prev: one, or several parts of at
// most logrecord.MaxBytes. A commit of a facet's database, or one that drops facets, is tagged.
func commitRecords(c *walship.Commit, head commitHead, epoch uint64, batch logrecord.BatchID, prev uint64) [][]byte {
	raw := encodeCommit(c)
	var tag byte
	if head.tagged() {
		raw = append(head.encode(nil), raw...)
		tag = logrecord.Tagged
	}
	payload, flags := pack(raw)
	flags |= tag
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

// dbSnapshot is one database's part of a tagged snapshot record.
type dbSnapshot struct {
	DB   string // as in commitHead
	Info snapshotInfo
}

func encodeSnapshots(es []dbSnapshot) []byte {
	b := binary.AppendUvarint(nil, uint64(len(es)))
	for _, e := range es {
		b = appendString(b, e.DB)
		b = appendString(b, string(e.Info.encode()))
	}
	return b
}

func decodeSnapshots(b []byte) ([]dbSnapshot, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: tagged snapshot record", errBadRecord)
	}
	b = b[k:]
	var es []dbSnapshot
	for range n {
		var db, info string
		var err error
		if db, b, err = readString(b); err == nil {
			info, b, err = readString(b)
		}
		if err != nil {
			return nil, err
		}
		si, err := decodeSnapshot([]byte(info))
		if err != nil {
			return nil, err
		}
		es = append(es, dbSnapshot{DB: db, Info: *si})
	}
	return es, nil
}

// snapshotsOf decodes a snapshot record's payload, tagged or not.
func snapshotsOf(r *logrecord.Record) ([]dbSnapshot, error) {
	if r.Flags&logrecord.Tagged != 0 {
		return decodeSnapshots(r.Payload)
	}
	si, err := decodeSnapshot(r.Payload)
	if err != nil {
		return nil, err
	}
	return []dbSnapshot{{Info: *si}}, nil
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

// recordSumOf returns the checksum of an encoded record.
func recordSumOf(rec []byte) uint64 {
	r, _ := logrecord.Decode(rec)
	return r.Sum
}
