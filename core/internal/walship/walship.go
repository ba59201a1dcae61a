// Package walship reads what SQLite commits append to a database's write-ahead log, as page images,
// and writes page images into a database file, as a checkpoint does. It knows SQLite's file formats
// and nothing else: a Cursor follows one -wal file from commit to commit, Apply brings a database
// file to the state a list of commits describes, and Image reads a whole database file as pages.
//
// The WAL format (https://www.sqlite.org/fileformat2.html#walformat): a 32-byte header (magic,
// version, page size, checkpoint sequence, two salts, a checksum of the header), then frames, each
// a 24-byte header (page number, the database's size in pages for a commit frame or 0, the two
// salts, a checksum chained over every frame since the header) and one page. A frame belongs to the
// log only while its salts are the header's and its checksum follows from the one before it; a
// commit is every frame up to and including a commit frame. A log restarted after a checkpoint gets
// new salts and is written from its start again.
package walship

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
)

const (
	walHeaderSize   = 32
	frameHeaderSize = 24
	magicLE         = 0x377f0682 // checksums over little-endian words
	magicBE         = 0x377f0683 // checksums over big-endian words
)

// Commit is the state that one or more commits left: the last image of every page they wrote, and
// the database's size in pages after the last of them.
type Commit struct {
	PageSize int
	DBPages  uint32 // the database's size in pages after the commit
	Pages    []Page // in page order, each page once
}

// Page is one page image.
type Page struct {
	No   uint32 // 1-based
	Data []byte // PageSize bytes
}

// Bytes is the size of the commit's page images.
func (c *Commit) Bytes() int { return len(c.Pages) * c.PageSize }

// Cursor follows a database's write-ahead log: Next returns what the commits appended since the
// cursor's position. It reads the file only; the caller makes sure no commit runs meanwhile. It
// keeps the log open between calls (a commit then costs two reads when nothing was written, not an
// open and a close), so it must not outlive the database connection whose log it follows: SQLite
// removes the log when that connection closes, and a new connection's log is another file. Close
// lets the file go.
type Cursor struct {
	path         string
	f            *os.File // the log, open once it exists
	salt1, salt2 uint32
	off          int64     // end of the last complete commit read
	sum          [2]uint32 // the running checksum at off
	order        binary.ByteOrder
	pageSize     int
	frame        []byte // a frame's buffer, kept for the next call
}

// NewCursor returns a cursor over the log at walPath (the database's path with "-wal"), placed
// after the last complete commit the log holds now: Next returns only what is committed later.
func NewCursor(walPath string) (*Cursor, error) {
	c := &Cursor{path: walPath}
	if _, err := c.Next(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the log's file, if the cursor opened it. A nil cursor does nothing.
func (c *Cursor) Close() error {
	if c == nil || c.f == nil {
		return nil
	}
	f := c.f
	c.f = nil
	return f.Close()
}

// Next returns the commits appended to the log since the last call (merged: each page's last image,
// the last commit's size), or nil if there is none. A log that was restarted since (new salts) is
// read from its start.
func (c *Cursor) Next() (*Commit, error) {
	if c.f == nil {
		f, err := os.Open(c.path)
		if errors.Is(err, fs.ErrNotExist) {
			c.salt1, c.salt2, c.off = 0, 0, 0
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		c.f = f
	}
	f := c.f
	var hdr [walHeaderSize]byte
	if n, err := f.ReadAt(hdr[:], 0); n < len(hdr) {
		if err == nil || errors.Is(err, io.EOF) { // empty, or being written: no commit yet
			c.salt1, c.salt2, c.off = 0, 0, 0
			return nil, nil
		}
		return nil, err
	}
	order, pageSize, salt1, salt2, sum, err := parseHeader(hdr[:])
	if err != nil {
		return nil, err
	}
	if c.off == 0 || salt1 != c.salt1 || salt2 != c.salt2 || pageSize != c.pageSize {
		// A new log (or the first look): read it from its first frame.
		c.salt1, c.salt2, c.pageSize, c.order = salt1, salt2, pageSize, order
		c.off, c.sum = walHeaderSize, sum
	}
	if len(c.frame) != frameHeaderSize+pageSize {
		c.frame = make([]byte, frameHeaderSize+pageSize)
	}
	frame := c.frame
	var pending, merged map[uint32][]byte // frames of the commit being read, and of complete ones
	var dbPages uint32
	off, s := c.off, c.sum
	for {
		if n, err := f.ReadAt(frame, off); n < len(frame) {
			if err == nil || errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if binary.BigEndian.Uint32(frame[8:]) != salt1 || binary.BigEndian.Uint32(frame[12:]) != salt2 {
			break // a frame of an earlier log
		}
		s = checksum(order, s, frame[:8])
		s = checksum(order, s, frame[frameHeaderSize:])
		if s[0] != binary.BigEndian.Uint32(frame[16:]) || s[1] != binary.BigEndian.Uint32(frame[20:]) {
			break // not chained to the frames before it: left over, never committed
		}
		off += int64(len(frame))
		if pending == nil {
			pending, merged = map[uint32][]byte{}, map[uint32][]byte{}
		}
		pgno := binary.BigEndian.Uint32(frame[0:])
		pending[pgno] = slices.Clone(frame[frameHeaderSize:])
		if size := binary.BigEndian.Uint32(frame[4:]); size != 0 { // a commit frame
			for no, p := range pending {
				merged[no] = p
			}
			clear(pending)
			dbPages = size
			c.off, c.sum = off, s
		}
	}
	if dbPages == 0 {
		return nil, nil
	}
	return makeCommit(pageSize, dbPages, merged), nil
}

func makeCommit(pageSize int, dbPages uint32, pages map[uint32][]byte) *Commit {
	out := &Commit{PageSize: pageSize, DBPages: dbPages, Pages: make([]Page, 0, len(pages))}
	for no, p := range pages {
		if no <= dbPages { // a page past the end was cut by a later commit's truncation
			out.Pages = append(out.Pages, Page{No: no, Data: p})
		}
	}
	slices.SortFunc(out.Pages, func(a, b Page) int { return int(a.No) - int(b.No) })
	return out
}

func parseHeader(h []byte) (order binary.ByteOrder, pageSize int, salt1, salt2 uint32, sum [2]uint32, err error) {
	switch binary.BigEndian.Uint32(h[0:]) {
	case magicLE:
		order = binary.LittleEndian
	case magicBE:
		order = binary.BigEndian
	default:
		return nil, 0, 0, 0, sum, fmt.Errorf("walship: not a write-ahead log (magic %#x)", binary.BigEndian.Uint32(h[0:]))
	}
	pageSize = int(binary.BigEndian.Uint32(h[8:]))
	if pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return nil, 0, 0, 0, sum, fmt.Errorf("walship: write-ahead log with page size %d", pageSize)
	}
	sum = checksum(order, [2]uint32{}, h[:24])
	if sum[0] != binary.BigEndian.Uint32(h[24:]) || sum[1] != binary.BigEndian.Uint32(h[28:]) {
		return nil, 0, 0, 0, sum, errors.New("walship: write-ahead log header checksum mismatch")
	}
	return order, pageSize, binary.BigEndian.Uint32(h[16:]), binary.BigEndian.Uint32(h[20:]), sum, nil
}

// checksum is SQLite's WAL checksum: over 32-bit words in the log's byte order, two at a time.
func checksum(order binary.ByteOrder, s [2]uint32, b []byte) [2]uint32 {
	s0, s1 := s[0], s[1]
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return [2]uint32{s0, s1}
}

// Apply writes c's pages into the database file at path (created if missing), truncates it to c's
// size and syncs it: what a checkpoint of c's frames does. The database must have no write-ahead
// log with frames of its own, and no connection open.
func Apply(path string, c *Commit) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = WritePages(f, c)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WritePages is Apply on an open file, without the sync.
func WritePages(f *os.File, c *Commit) error {
	for _, p := range c.Pages {
		if len(p.Data) != c.PageSize || p.No == 0 {
			return fmt.Errorf("walship: page %d of %d bytes in a commit of %d-byte pages", p.No, len(p.Data), c.PageSize)
		}
		if _, err := f.WriteAt(p.Data, int64(p.No-1)*int64(c.PageSize)); err != nil {
			return err
		}
	}
	return f.Truncate(int64(c.DBPages) * int64(c.PageSize))
}

// Image reads the database file at path (with no write-ahead log frames of its own) as one commit
// holding every page. The page size is read from the file's header.
func Image(path string) (*Commit, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ImageOf(b)
}

// ImageOf is Image of a database file's bytes.
func ImageOf(b []byte) (*Commit, error) {
	if len(b) < 100 || string(b[:16]) != "SQLite format 3\x00" {
		return nil, errors.New("walship: not an SQLite database")
	}
	pageSize := int(binary.BigEndian.Uint16(b[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || len(b)%pageSize != 0 {
		return nil, fmt.Errorf("walship: database of %d bytes with %d-byte pages", len(b), pageSize)
	}
	c := &Commit{PageSize: pageSize, DBPages: uint32(len(b) / pageSize)}
	for i := range int(c.DBPages) {
		c.Pages = append(c.Pages, Page{No: uint32(i + 1), Data: b[i*pageSize : (i+1)*pageSize]})
	}
	return c, nil
}
