package replica

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/core/internal/walship"
	"github.com/durable-go/durable/internal/logrecord"
	"github.com/durable-go/durable/replog"
)

var errNotAt = errors.New("core: the local file is not at this record")

// logEnd is where a read of the log ended.
type logEnd struct {
	seq, sum uint64   // the last record read, and its checksum
	epoch    uint64   // the last epoch read
	records  int      // the records read since the last snapshot record, or all of them if none
	snapped  bool     // a snapshot record was read
	blobs    []string // the blobs of the last snapshot record read
	facets   bool     // a record of a facet's database (or of several databases) was read
	dbs      []string // the databases named by the records read (those of the object's own untagged)
	data     bool     // the target holds a database
}

// replay reads the object's log after sequence after into the local file: with want, the local file
// itself, which must be at the commit of batch want, the first record after after (at reports
// whether it was); without, a new file built from nothing, which replaces the local one. Only the
// records of the Object's database (x.db) are applied; every record is checked. It returns where
// the read ended, for the caller to take in.
func (x *Object) replay(h Host, after uint64, want *logrecord.BatchID, st *sqlstore.DB) (end logEnd, at bool, _ *sqlstore.DB, err error) {
	path := x.path
	if want == nil {
		end, err = x.build(path+".rebuild", nil)
		if err != nil {
			return end, false, nil, err
		}
		removeLocal(path)
		if end.data {
			if err = os.Rename(path+".rebuild", path); err != nil {
				return end, false, nil, err
			}
			datadir.SyncDir(filepath.Dir(path))
		}
		h.Replaced()
		return end, true, nil, nil
	}
	end, at, st, err = x.read(path, after, want, st, x.db)
	return end, at, st, err
}

// build writes database db of the object (nil: the Object's own), as the log has it, into a new
// file at target, which it removes if the log holds no data for it (end.data is false).
func (x *Object) build(target string, db *string) (logEnd, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return logEnd{}, err
	}
	which := x.db
	if db != nil {
		which = *db
	}
	end, _, _, err := x.read(target, 0, nil, nil, which)
	if err == nil && !end.data {
		os.Remove(target)
	}
	return end, err
}

// read reads the log after sequence after into target: with want, the local file (open as st),
// which must be at the commit of batch want; without, a new file (truncated first, and removed if
// the read fails). It applies the commits of database db only.
func (x *Object) read(target string, after uint64, want *logrecord.BatchID, st *sqlstore.DB, db string) (end logEnd, at bool, _ *sqlstore.DB, err error) {
	path := x.path
	var f *os.File
	written := false                   // the target was written to
	open := func() (*os.File, error) { // the local file is written only once st is closed
		if f != nil {
			return f, nil
		}
		if st != nil {
			err := st.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)")
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			st = nil
			if err != nil {
				return nil, err
			}
		}
		var err error
		f, err = os.OpenFile(target, os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			// Held as an open database holds its file: a background check of the file does not read
			// it while it is written (a warm catch-up runs outside the object's gate).
			err = sqlstore.LockFile(f)
		}
		if err == nil && want == nil {
			err = f.Truncate(0)
		}
		if err != nil {
			if f != nil {
				f.Close()
				f = nil
			}
			return nil, err
		}
		written = true
		return f, nil
	}
	if want == nil {
		if _, err := open(); err != nil {
			return end, false, nil, err
		}
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if want == nil && err != nil {
			os.Remove(target)
		}
	}()
	var (
		seq, sum  uint64
		lastEpoch uint64
		chained   bool
		first     = true
		waiting   = want != nil // for the records of the file's own batch
		parts     []byte        // the payload of the commit being read, part by part
		partBatch logrecord.BatchID
		nextPart  uint32
		data      = want != nil // the target holds a database
		records   int
		snapped   bool // a snapshot record was read: records counts from it
		blobs     []string
		facets    bool
		dbs       = map[string]bool{}
		pages     = pageCache{open: open}
		raw       bytes.Buffer
	)
	ctx, cancel := x.n.bgCtx(replayTimeout)
	defer cancel()
	err = x.n.cfg.Log.Read(ctx, x.key, after, func(s uint64, b []byte) error {
		r, err := logrecord.Decode(b)
		if err != nil {
			return fmt.Errorf("record %d: %w", s, err)
		}
		if waiting { // catching up: the file's own batch comes first, and complete
			if r.Kind != logrecord.Commit || r.Batch != *want || first && r.Part != 0 {
				return errNotAt
			}
			waiting = r.HasMore()
		}
		if chained && r.Prev != sum {
			return fmt.Errorf("record %d: %w: not chained to record %d", s, errBadRecord, seq)
		}
		if r.Epoch < lastEpoch {
			return fmt.Errorf("record %d: %w: epoch %d after epoch %d", s, errBadRecord, r.Epoch, lastEpoch)
		}
		first, chained, seq, sum, lastEpoch = false, true, s, r.Sum, r.Epoch
		records++
		switch r.Kind {
		case logrecord.Epoch:
			parts = nil // a commit left in parts by a writer that stopped: never complete
		case logrecord.Snapshot:
			parts = nil
			records, snapped = 0, true
			snaps, err := snapshotsOf(r)
			if err != nil {
				return fmt.Errorf("record %d: %w", s, err)
			}
			blobs = blobs[:0]
			var info *snapshotInfo
			for i := range snaps {
				blobs = append(blobs, snaps[i].Info.Blob)
				dbs[snaps[i].DB] = true
				if snaps[i].DB == db {
					info = &snaps[i].Info
				}
			}
			facets = facets || r.Flags&logrecord.Tagged != 0
			if want != nil {
				return nil // a snapshot of a state the file went through
			}
			pages.drop()
			if info == nil { // the database had no data when the snapshot was taken
				data = false
				return f.Truncate(0)
			}
			if err := loadSnapshot(ctx, x.n.cfg.Log, x.key, info, f); err != nil { // f is open: not catching up
				return fmt.Errorf("record %d: %w", s, err)
			}
			data = true
		case logrecord.Commit:
			if r.Part == 0 {
				parts, partBatch, nextPart = parts[:0], r.Batch, 0
			} else if r.Batch != partBatch || r.Part != nextPart || parts == nil {
				return fmt.Errorf("record %d: %w: part %d of a commit out of place", s, errBadRecord, r.Part)
			}
			parts = append(parts, r.Payload...)
			nextPart++
			if r.HasMore() {
				return nil
			}
			b, err := unpack(parts, r.Flags, &raw)
			parts = nil
			if err != nil {
				return fmt.Errorf("record %d: %w", s, err)
			}
			if want != nil && r.Batch == *want {
				return nil // the local file's own commit
			}
			var head commitHead
			if r.Flags&logrecord.Tagged != 0 {
				facets = true
				if head, b, err = decodeHead(b); err != nil {
					return fmt.Errorf("record %d: %w", s, err)
				}
			}
			dbs[head.DB] = true
			if head.drops(db) { // its facet was deleted: it starts empty
				if want != nil {
					return errDropped
				}
				pages.drop()
				data = false
				return f.Truncate(0)
			}
			if head.DB != db {
				return nil // another database's
			}
			c, err := decodeCommit(b)
			if err != nil {
				return fmt.Errorf("record %d: %w", s, err)
			}
			if err := pages.add(c); err != nil {
				return err
			}
			data = true
		default:
			return fmt.Errorf("record %d: %w: kind %d", s, errBadRecord, r.Kind)
		}
		return nil
	})
	if err == nil {
		err = pages.flush()
	}
	if errors.Is(err, errNotAt) || waiting {
		return end, false, st, nil // nothing written: the file's own batch is checked before anything
	}
	if errors.Is(err, errDropped) { // its facet was deleted since: rebuilt (empty) from nothing
		if written {
			removeLocal(path)
		}
		return end, false, st, nil
	}
	if err != nil {
		if want != nil && written {
			removeLocal(path) // partly caught up: a cache no longer
		}
		return end, false, st, fmt.Errorf("core: read the log of %s: %w", x.key, err)
	}
	if f != nil {
		if err = f.Sync(); err == nil {
			err = f.Close()
		}
		f = nil
		if err != nil {
			return end, false, nil, err
		}
	}
	end = logEnd{seq: seq, sum: sum, epoch: lastEpoch, records: records, snapped: snapped, blobs: blobs, facets: facets, data: data,
		dbs: slices.Sorted(maps.Keys(dbs))}
	return end, true, st, nil
}

// errDropped stops a catching up at a commit that deleted the file's facet.
var errDropped = errors.New("core: the facet was deleted")

// pageCache gathers the pages of replayed commits, each page's last image, and writes them into the
// file in one pass (a counter's commits rewrite the same few pages): at the end of the replay, or
// once it holds replayCacheBytes.
type pageCache struct {
	open     func() (*os.File, error)
	pages    map[uint32][]byte
	pageSize int
	dbPages  uint32
	bytes    int
}

const replayCacheBytes = 64 << 20

func (p *pageCache) add(c *walship.Commit) error {
	if p.pageSize != 0 && p.pageSize != c.PageSize {
		if err := p.flush(); err != nil {
			return err
		}
	}
	if p.pages == nil {
		p.pages = map[uint32][]byte{}
	}
	shrank := c.DBPages < p.dbPages
	p.pageSize, p.dbPages = c.PageSize, c.DBPages
	for _, pg := range c.Pages {
		if old, ok := p.pages[pg.No]; ok {
			copy(old, pg.Data)
			continue
		}
		p.pages[pg.No] = bytes.Clone(pg.Data)
		p.bytes += len(pg.Data)
	}
	if shrank { // pages past the end are cut by the commit
		for no := range p.pages {
			if no > p.dbPages {
				delete(p.pages, no)
				p.bytes -= p.pageSize
			}
		}
	}
	if p.bytes >= replayCacheBytes {
		return p.flush()
	}
	return nil
}

// flush writes the gathered pages and truncates the file to the last commit's size.
func (p *pageCache) flush() error {
	if p.pageSize == 0 {
		return nil
	}
	f, err := p.open()
	if err != nil {
		return err
	}
	c := &walship.Commit{PageSize: p.pageSize, DBPages: p.dbPages}
	for no, data := range p.pages {
		c.Pages = append(c.Pages, walship.Page{No: no, Data: data})
	}
	slices.SortFunc(c.Pages, func(a, b walship.Page) int { return cmp.Compare(a.No, b.No) })
	err = walship.WritePages(f, c)
	p.drop()
	return err
}

// drop forgets the gathered pages (a snapshot replaces the file).
func (p *pageCache) drop() {
	clear(p.pages)
	p.pageSize, p.dbPages, p.bytes = 0, 0, 0
}

// loadSnapshot writes the snapshot's blob as the whole of f, checking its size and checksum.
func loadSnapshot(ctx context.Context, log replog.Log, key string, info *snapshotInfo, f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := log.GetBlob(ctx, key, info.Blob, cw); err != nil {
		return fmt.Errorf("snapshot %q: %w", info.Blob, err)
	}
	if cw.n != info.Size || !bytes.Equal(sumOf(h), info.SHA256[:]) {
		return fmt.Errorf("%w: snapshot %q of %d bytes does not match its record (%d bytes)", errBadRecord, info.Blob, cw.n, info.Size)
	}
	return nil
}

func sumOf(h hash.Hash) []byte { return h.Sum(nil) }

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// removeLocal deletes an object's local file with its WAL and shared memory: a cache, rebuilt from
// the log when needed.
func removeLocal(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
	}
}
