package datadir

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/durable-go/durable/core/internal/sqlstore"
)

// NamespaceDir is the directory of a namespace's top-level objects.
func NamespaceDir(root, ns string) string { return filepath.Join(root, ns) }

// DBFile is the database of the object id whose files are in dir (a namespace's directory, or its
// parent's FacetsDir).
func DBFile(dir, id string) string { return filepath.Join(dir, id+".sqlite") }

// FacetsDir is the directory of the object id's facets.
func FacetsDir(dir, id string) string { return filepath.Join(dir, id+".facets") }

// IsFacetFile reports whether a database file, relative to the data directory, is a facet's.
func IsFacetFile(rel string) bool { return strings.Contains(rel, ".facets") }

// FileSize is the size of a database with its WAL.
func FileSize(path string) int64 {
	var n int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(path + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// DirExists reports whether path is a directory.
func DirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// SyncDir makes a directory's entries durable (best effort: some systems cannot sync directories).
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// CopyFileSync copies src to dst and syncs dst.
func CopyFileSync(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return sqlstore.WriteFileSync(dst, b)
}

// CheckFile opens a database file on its own and runs SQLite's quick check on it. damage says what
// is wrong with the file ("" if nothing); err is a failure to open it at all.
func CheckFile(path string) (damage string, err error) {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var check string
	if err := db.QueryRow("PRAGMA main.quick_check(1)").Scan(&check); err != nil {
		return err.Error(), nil
	}
	if check != "ok" {
		return "quick check: " + check, nil
	}
	return "", nil
}

// IsCorrupt reports whether err is SQLite's verdict that a file is not a sound database.
func IsCorrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
		return true
	}
	return false
}

// Quarantine moves an object's files (its database db with its WAL and shared memory, and its
// facets' directory facets) into root/_quarantine/<ns>/<id>-<now>/, durably, and returns that
// directory.
func Quarantine(root, ns, id, db, facets string, now time.Time) (string, error) {
	dest := filepath.Join(root, "_quarantine", ns, id+"-"+now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return "", err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(db+suffix, DBFile(dest, id)+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	if err := os.Rename(facets, FacetsDir(dest, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	SyncDir(filepath.Dir(db))
	SyncDir(dest)
	return dest, nil
}

// WALHeaderDamage checks the header of path's write-ahead log, if the log holds frames, and returns
// why it is damaged ("" if it is not, or there is no log). SQLite ignores a log whose header is
// invalid (its magic, version or checksum), so committed rows that live only in the log would be
// served as missing. It reads 32 bytes: no cost worth measuring at an open.
func WALHeaderDamage(path string) (string, error) {
	f, err := os.Open(path + "-wal")
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= walHeaderSize { // empty, or a header alone: no frames to lose
		return "", err
	}
	var h [walHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return "", err
	}
	magic := binary.BigEndian.Uint32(h[0:])
	switch {
	case magic&^1 != 0x377f0682:
		return fmt.Sprintf("WAL header: bad magic number %#x", magic), nil
	case binary.BigEndian.Uint32(h[4:]) != 3007000:
		return fmt.Sprintf("WAL header: unknown version %d", binary.BigEndian.Uint32(h[4:])), nil
	}
	// The checksum of the first 24 bytes, as SQLite computes it: 32-bit words, big-endian if the
	// magic number's low bit is set, else little-endian.
	order := binary.ByteOrder(binary.LittleEndian)
	if magic&1 != 0 {
		order = binary.BigEndian
	}
	var s0, s1 uint32
	for i := 0; i < 24; i += 8 {
		s0 += order.Uint32(h[i:]) + s1
		s1 += order.Uint32(h[i+4:]) + s0
	}
	if s0 != binary.BigEndian.Uint32(h[24:]) || s1 != binary.BigEndian.Uint32(h[28:]) {
		return "WAL header: checksum mismatch", nil
	}
	return "", nil
}

const walHeaderSize = 32
