package datadir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/durable-go/durable/core/internal/sqlstore"
)

// HeaderDamage checks what can be checked of a database file without reading its pages: its
// 100-byte header (magic string, page size, the fixed payload fractions) and, when its write-ahead
// log holds no frames, that the file holds every page its header counts (a file that lost its tail
// would otherwise serve the pages it kept). It returns why the file is damaged ("" if it is not, or
// there is no file). It reads 100 bytes and two file sizes, whatever the database's size: the pages
// themselves are checked by SQLite as it reads them, and by the full check (QuickCheck) off the
// request path.
//
// With frames in the log, the file may legitimately be shorter than its header says: a checkpoint
// cut short by a crash writes page 1 before the pages past the old end, and the log, still whole,
// is copied again on the next open. The log's own header is checked by WALHeaderDamage.
func HeaderDamage(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return headerDamage(f, fi.Size(), WALFrames(path))
}

// Damage is the check of path's headers (HeaderDamage's and WALHeaderDamage's) that
// sqlstore.OpenChecked runs on the database file it opened, through SQLite's own descriptor: one
// read of 100 bytes and the log's size, and 32 bytes of the log if it holds frames.
func Damage(path string) sqlstore.FileCheck {
	return func(f io.ReaderAt, size int64) (string, error) {
		wal, err := os.Stat(path + "-wal")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		frames := err == nil && wal.Size() > walHeaderSize
		if why, err := headerDamage(f, size, frames); why != "" || err != nil || !frames {
			return why, err
		}
		return WALHeaderDamage(path)
	}
}

// headerDamage is HeaderDamage's check of the database file f, of size bytes, whose log holds
// frames or not.
func headerDamage(f io.ReaderAt, size int64, frames bool) (string, error) {
	if size == 0 {
		return "", nil // the caller's case: empty is its own finding
	}
	var h [100]byte
	if _, err := f.ReadAt(h[:], 0); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Sprintf("header: %d bytes, shorter than a database header", size), nil
	} else if err != nil {
		return "", err
	}
	if !bytes.Equal(h[:16], []byte("SQLite format 3\x00")) {
		return "header: not an SQLite database (bad magic string)", nil
	}
	pageSize := int64(binary.BigEndian.Uint16(h[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return fmt.Sprintf("header: invalid page size %d", pageSize), nil
	}
	if h[21] != 64 || h[22] != 32 || h[23] != 32 {
		return "header: invalid payload fractions", nil
	}
	if size%pageSize != 0 {
		return fmt.Sprintf("file size %d is not a whole number of %d-byte pages", size, pageSize), nil
	}
	if frames {
		return "", nil
	}
	// The header's page count is valid when its version-valid-for number matches the change counter
	// (SQLite 3.7.0 and later write both at every commit).
	pages := int64(binary.BigEndian.Uint32(h[28:]))
	if pages > 0 && bytes.Equal(h[24:28], h[92:96]) && size < pages*pageSize {
		return fmt.Sprintf("truncated: %d pages of %d bytes, the header counts %d", size/pageSize, pageSize, pages), nil
	}
	return "", nil
}

// WALFrames reports whether path's write-ahead log holds frames (is longer than its header).
func WALFrames(path string) bool {
	fi, err := os.Stat(path + "-wal")
	return err == nil && fi.Size() > walHeaderSize
}
