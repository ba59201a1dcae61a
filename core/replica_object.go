package core

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/walship"
)

// replState is an object's side of cluster mode, touched by the gate holder only.
type replState struct {
	key      string // the object's log and lease key: "namespace/name"
	lease    *lease // held while the object is resident here
	synced   bool   // the local file is at the log's head and this node's epoch record is in
	seq      uint64 // the log's last record, as this node appended or read it
	sum      uint64 // its checksum
	epoch    uint64 // this node's epoch for the object
	cursor   *walship.Cursor
	shipFull bool    // the local file holds pages that no record has (a new file): ship it whole
	pending  batchID // the batch id the open batch writes in its position row
	records  int     // records since the last snapshot
	snapBlob string  // the blob of the last snapshot, deleted when the next one is in
}

func newReplState(ns *namespace, name string) *replState {
	return &replState{key: ns.name + "/" + name}
}

// claim makes the object servable by this node for one turn: its lease taken (or proven valid), its
// local file at the log's head, this node's epoch record appended. ErrNotOwner while another node
// holds a valid lease; ErrFenced if this node's lease was taken over.
func (o *object) claim() error {
	rs, n := o.rs, o.rt.repl
	if rs.lease != nil {
		if err := n.check(o.rt, rs.lease); err != nil {
			if errors.Is(err, ErrFenced) {
				return o.discard(err)
			}
			return err
		}
		if rs.synced {
			return nil
		}
	} else {
		o.ns.waitClosed(o.id)
		l, err := n.take(o.rt, rs.key)
		if err != nil {
			return err
		}
		rs.lease, rs.synced = l, false
	}
	if o.store != nil { // not synced: whatever is open is not known to be at the log's head
		o.closeStore()
	}
	if err := o.openEpoch(); err != nil {
		// The log could not be read or appended to: hand the lease back rather than hold an object
		// this node cannot serve.
		removeLocal(o.place.db)
		if rerr := n.release(rs.lease); rerr != nil {
			err = errors.Join(err, rerr)
		}
		rs.lease = nil
		return err
	}
	return nil
}

// openEpoch brings the local file to the log's head and appends this node's epoch record, so that an
// append of a former owner, paused meanwhile, fails. A record that lands between the two (that
// former owner's) is read in and the epoch record tried again.
func (o *object) openEpoch() error {
	rs := o.rs
	var err error
	for range 8 {
		var lastEpoch uint64
		if lastEpoch, err = o.syncLog(); err != nil {
			return err
		}
		rs.lease.mu.Lock()
		epoch := max(rs.lease.rev, lastEpoch+1)
		rs.lease.mu.Unlock()
		r := record{kind: recEpoch, epoch: epoch, batch: newBatchID(), prev: rs.sum, payload: []byte(o.rt.repl.cfg.Node)}
		var seq uint64
		if seq, err = o.appendOne(rs.seq, r.encode()); errors.Is(err, ErrFenced) {
			continue
		} else if err != nil {
			return err
		}
		rs.seq, rs.sum, rs.epoch = seq, r.sum, epoch
		rs.records++
		rs.lease.setEpoch(o.rt.repl.cfg.Node, epoch)
		rs.synced = true
		o.indexLocal()
		return nil
	}
	return fmt.Errorf("%w: the log of %s kept moving while this node took it over: %v", ErrLeaseUnproven, rs.key, err)
}

// indexLocal tells this node's catalog and alarm index of the object, as its open file now is: a
// file rebuilt from the log has timers this node's index never saw.
func (o *object) indexLocal() {
	if o.store == nil {
		return
	}
	var created, at sql.NullInt64
	err := o.store.QueryOwn(`SELECT (SELECT v FROM main._durable_meta WHERE k = 'created'), (SELECT min(at) FROM main._durable_timers)`,
		nil, func(r *sql.Rows) error { return r.Scan(&created, &at) })
	if err == nil {
		e := o.catalogEntry()
		e.Size = datadir.FileSize(o.place.db)
		if created.Valid {
			e.Created = created.Int64
		}
		err = o.rt.ix.Catalog(e, false)
	}
	if err == nil && at.Int64 != 0 {
		if err = o.rt.sched.EnsureIndexed(o.ns.name, o.id, o.name, at.Int64); err == nil {
			o.rt.sched.Schedule(o.ns.name, o.id, o.name, at.Int64)
		}
	}
	if err != nil {
		o.rt.log.Warn("an object rebuilt from the log could not be indexed", "event", "cluster_index_failed",
			"namespace", o.ns.name, "name", o.name, "error", err)
	}
}

// syncLog brings the local file to the log's head: from where the file says it is (the position row
// its last commit wrote), or, if the file is missing, damaged or ahead of the log (it committed a
// batch whose record never made it), rebuilt from the latest snapshot and the records after it. The
// file is left open as the object's database, if there is one. It returns the last epoch the log
// holds.
func (o *object) syncLog() (uint64, error) {
	o.closeStore()
	why := "no local file with a position in the log"
	if st, prev, batch, recs, ok := o.openLocal(); ok {
		o.rs.records = recs // the records since the last snapshot, as the file's last commit counted them
		ep, at, st, err := o.replay(prev, &batch, st)
		if err != nil || !at {
			if st != nil {
				st.Close()
			}
		}
		if err != nil {
			return ep, err
		}
		if at {
			return ep, o.adopt(st)
		}
		why = "the local file is not at a record of the log"
	}
	o.rt.log.Debug("an object is rebuilt from its log", "event", "cluster_rebuild", "namespace", o.ns.name, "name", o.name, "reason", why)
	ep, _, _, err := o.replay(0, nil, nil)
	if err != nil {
		return ep, err
	}
	return ep, o.adopt(nil)
}

// openLocal opens the local file and reads its position row: the sequence its last commit's record
// was appended after, that commit's batch id, and the records the log held before it since the
// last snapshot.
func (o *object) openLocal() (st *store, prev uint64, batch batchID, records int, ok bool) {
	path := o.place.db
	if _, err := os.Stat(path); err != nil {
		removeLocal(path) // a WAL left without its database
		return nil, 0, batch, 0, false
	}
	st, fresh, err := o.openDB()
	if err != nil {
		return nil, 0, batch, 0, false
	}
	var p, n sql.NullInt64
	var b []byte
	if !fresh {
		err = st.QueryOwn(`SELECT (SELECT v FROM main._durable_meta WHERE k = 'log_prev'), (SELECT v FROM main._durable_meta WHERE k = 'log_batch'), (SELECT v FROM main._durable_meta WHERE k = 'log_records')`,
			nil, func(r *sql.Rows) error { return r.Scan(&p, &b, &n) })
	}
	if fresh || err != nil || !p.Valid || len(b) != len(batch) {
		st.Close()
		return nil, 0, batch, 0, false
	}
	copy(batch[:], b)
	return st, uint64(p.Int64), batch, int(n.Int64), true
}

// adopt makes st (or, if nil, the local file opened now, if there is one) the object's database.
func (o *object) adopt(st *store) error {
	fresh := false
	if st == nil {
		if _, err := os.Stat(o.place.db); err != nil {
			return nil // no file: the first turn that uses storage makes one
		}
		var err error
		if st, fresh, err = o.openDB(); err != nil {
			return fmt.Errorf("core: open database: %w", err)
		}
	}
	if err := o.rs.opened(o.place.db, fresh); err != nil {
		st.Close()
		return fmt.Errorf("core: open database: %w", err)
	}
	o.store, o.fresh = st, fresh
	o.hasStore.Store(true)
	o.rt.stats.openDBs.Add(1)
	o.rt.shed()
	return nil
}

var errNotAt = errors.New("core: the local file is not at this record")

// replay reads the object's log after sequence after into the local file: with want, the local file
// itself, which must be at the commit of batch want, the first record after after (at reports
// whether it was); without, a new file built from nothing, which replaces the local one. It sets
// the object's log position and returns the last epoch read.
func (o *object) replay(after uint64, want *batchID, st *store) (lastEpoch uint64, at bool, _ *store, err error) {
	rs := o.rs
	path := o.place.db
	target := path + ".rebuild"
	if want != nil {
		target = path
	}
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
		flags := os.O_RDWR | os.O_CREATE
		if want == nil {
			flags |= os.O_TRUNC
		}
		var err error
		f, err = os.OpenFile(target, flags, 0o644)
		written = err == nil
		return f, err
	}
	if want == nil {
		if _, err := open(); err != nil {
			return 0, false, nil, err
		}
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if want == nil || err != nil && written {
			os.Remove(target)
		}
	}()
	var (
		seq, sum  uint64
		chained   bool
		first     = true
		waiting   = want != nil // for the records of the file's own batch
		parts     []byte        // the payload of the commit being read, part by part
		partBatch batchID
		nextPart  uint32
		data      = want != nil // the target holds a database
		records   int
		snapped   bool // a snapshot record was read: records counts from it
		blob      = rs.snapBlob
		pages     = pageCache{open: open}
		raw       bytes.Buffer
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*replOpTimeout)
	defer cancel()
	err = o.rt.repl.cfg.Log.Read(ctx, rs.key, after, func(s uint64, b []byte) error {
		r, err := decodeRecord(b)
		if err != nil {
			return fmt.Errorf("record %d: %w", s, err)
		}
		if waiting { // catching up: the file's own batch comes first, and complete
			if r.kind != recCommit || r.batch != *want || first && r.part != 0 {
				return errNotAt
			}
			waiting = r.more()
		}
		if chained && r.prev != sum {
			return fmt.Errorf("record %d: %w: not chained to record %d", s, errBadRecord, seq)
		}
		if r.epoch < lastEpoch {
			return fmt.Errorf("record %d: %w: epoch %d after epoch %d", s, errBadRecord, r.epoch, lastEpoch)
		}
		first, chained, seq, sum, lastEpoch = false, true, s, r.sum, r.epoch
		records++
		switch r.kind {
		case recEpoch:
			parts = nil // a commit left in parts by a writer that stopped: never complete
		case recSnapshot:
			parts = nil
			records, snapped = 0, true
			info, err := decodeSnapshot(r.payload)
			if err != nil {
				return fmt.Errorf("record %d: %w", s, err)
			}
			blob = info.Blob
			if want != nil {
				return nil // a snapshot of a state the file went through
			}
			pages.drop()
			if err := loadSnapshot(ctx, o.rt.repl.cfg.Log, info, f); err != nil { // f is open: not catching up
				return fmt.Errorf("record %d: %w", s, err)
			}
			data = true
		case recCommit:
			if r.part == 0 {
				parts, partBatch, nextPart = parts[:0], r.batch, 0
			} else if r.batch != partBatch || r.part != nextPart || parts == nil {
				return fmt.Errorf("record %d: %w: part %d of a commit out of place", s, errBadRecord, r.part)
			}
			parts = append(parts, r.payload...)
			nextPart++
			if r.more() {
				return nil
			}
			b, err := unpack(parts, r.flags, &raw)
			parts = nil
			if err != nil {
				return fmt.Errorf("record %d: %w", s, err)
			}
			if want != nil && r.batch == *want {
				return nil // the local file's own commit
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
			return fmt.Errorf("record %d: %w: kind %d", s, errBadRecord, r.kind)
		}
		return nil
	})
	if err == nil {
		err = pages.flush()
	}
	if errors.Is(err, errNotAt) || waiting {
		return 0, false, st, nil // nothing written: the file's own batch is checked before anything
	}
	if err != nil {
		if want != nil && written {
			removeLocal(path) // partly caught up: a cache no longer
		}
		return 0, false, st, fmt.Errorf("core: read the log of %s: %w", rs.key, err)
	}
	if f != nil {
		if err = f.Sync(); err == nil {
			err = f.Close()
		}
		f = nil
		if err != nil {
			return 0, false, nil, err
		}
	}
	if want == nil {
		removeLocal(path)
		if data {
			if err = os.Rename(target, path); err != nil {
				return 0, false, nil, err
			}
			datadir.SyncDir(filepath.Dir(path))
		}
		o.rt.checked.Delete(path)
	}
	rs.seq, rs.sum, rs.snapBlob = seq, sum, blob
	if seq == 0 {
		rs.sum = 0
	}
	if want == nil || snapped {
		rs.records = records
	} else {
		rs.records += records
	}
	return lastEpoch, true, st, nil
}

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
func loadSnapshot(ctx context.Context, log Log, info *snapshotInfo, f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := log.GetBlob(ctx, info.Blob, cw); err != nil {
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

// opened is told that the object's database was opened: the cursor starts at the log's end. A new
// file (from the template) holds pages no record has: the next commit ships it whole.
func (rs *replState) opened(path string, fresh bool) error {
	c, err := walship.NewCursor(path + "-wal")
	if err != nil {
		return err
	}
	rs.cursor = c
	rs.shipFull = rs.shipFull || fresh
	return nil
}

// servable refuses storage to a turn that goes on after its object was discarded (fenced, or its
// commit failed): only a new turn, which claims the object again, may open it.
func (rs *replState) servable() error {
	switch {
	case rs.lease == nil:
		return fmt.Errorf("%w: this node no longer owns %s", ErrFenced, rs.key)
	case !rs.synced:
		return fmt.Errorf("%w: %s must be claimed again by a new turn", ErrLeaseUnproven, rs.key)
	}
	return nil
}

// beforeCommit runs before the batch's local COMMIT: the lease must be valid, and a batch that wrote
// records its position in the log (the sequence its record follows, its batch id), so that a
// restart can tell a file at a record from one ahead of the log, and the records since the last
// snapshot, so that a file caught up from the log goes on counting them.
func (o *object) beforeCommit(b *batch) error {
	rs := o.rs
	if err := rs.servable(); err != nil {
		return err
	}
	if err := o.rt.repl.check(o.rt, rs.lease); err != nil {
		return err
	}
	if !b.dirty {
		return nil
	}
	rs.pending = newBatchID()
	return o.store.ExecOwn(`REPLACE INTO main._durable_meta(k, v) VALUES ('log_prev', ?), ('log_batch', ?), ('log_records', ?)`,
		int64(rs.seq), rs.pending[:], rs.records)
}

// ship appends what the local COMMIT wrote to the object's log, as one commit's records, before the
// batch's output is released.
func (o *object) ship(b *batch) error {
	rs := o.rs
	var c *walship.Commit
	var err error
	if rs.shipFull {
		if err = o.store.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)"); err == nil {
			if c, err = walship.Image(o.place.db); err == nil {
				rs.cursor, err = walship.NewCursor(o.place.db + "-wal")
			}
		}
	} else {
		c, err = rs.cursor.Next()
	}
	if err != nil {
		return err
	}
	if c == nil {
		return nil // the batch wrote nothing
	}
	id := rs.pending
	if !b.dirty {
		id = newBatchID()
	}
	recs := commitRecords(c, rs.epoch, id, rs.sum)
	for _, rec := range recs {
		seq, err := o.appendOne(rs.seq, rec)
		if err != nil {
			return err
		}
		rs.seq = seq
		rs.sum = recordSumOf(rec)
	}
	rs.shipFull = false
	rs.records += len(recs)
	o.rt.repl.shipped(len(recs), c, recs)
	return nil
}

func recordSumOf(rec []byte) uint64 {
	r, _ := decodeRecord(rec)
	return r.sum
}

// appendOne appends rec after expect and resolves an outcome the log could not tell: by reading the
// log's head (is it rec?), and appending again while the head has not moved, a few times. It fails
// with ErrFenced if another writer appended, and with ErrCommitUnknown if the outcome stays unknown.
func (o *object) appendOne(expect uint64, rec []byte) (uint64, error) {
	log, key := o.rt.repl.cfg.Log, o.rs.key
	var lastErr error
	for try := range 4 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 20 * time.Millisecond)
		}
		ctx, cancel := replCtx()
		seq, err := log.Append(ctx, key, expect, rec)
		cancel()
		if err == nil {
			return seq, nil
		}
		lastErr = err
		ctx, cancel = replCtx()
		head, headRec, herr := log.Last(ctx, key)
		cancel()
		switch {
		case herr != nil:
			lastErr = errors.Join(err, herr)
		case head != expect && bytes.Equal(headRec, rec):
			return head, nil // it was appended: the acknowledgement was lost
		case head != expect:
			// Another writer appended. If it appended after this record (a new owner that read it),
			// this record is in, right after expect, and the commit stands.
			seq, in, rerr := o.landedAfter(expect, rec)
			switch {
			case rerr != nil:
				lastErr = errors.Join(err, rerr)
				continue
			case in:
				return seq, nil
			}
			return 0, fmt.Errorf("%w: the log of %s moved on (at %d, not %d): %v", ErrFenced, key, head, expect, err)
		}
	}
	return 0, fmt.Errorf("%w: append to the log of %s: %v", ErrCommitUnknown, key, lastErr)
}

// errFirstRead stops a Read at its first record.
var errFirstRead = errors.New("core: first record read")

// landedAfter reports whether rec is the record right after expect in the object's log, where an
// append expecting expect lands if it lands at all.
func (o *object) landedAfter(expect uint64, rec []byte) (seq uint64, in bool, err error) {
	ctx, cancel := replCtx()
	defer cancel()
	err = o.rt.repl.cfg.Log.Read(ctx, o.rs.key, expect, func(s uint64, r []byte) error {
		seq, in = s, bytes.Equal(r, rec)
		return errFirstRead
	})
	if errors.Is(err, errFirstRead) {
		err = nil
	}
	return seq, in, err
}

// discard handles a failure in cluster mode: the batch is abandoned (its turns get err, its output
// is dropped), the database closed, the instance dropped, and the local file deleted: it may be
// ahead of the log, and the log rebuilds it. If another node took the object over, its lease is
// forgotten too.
func (o *object) discard(cause error) error {
	err := cause
	switch {
	case errors.Is(cause, ErrFenced), errors.Is(cause, ErrLeaseUnproven), errors.Is(cause, ErrCommitUnknown), errors.Is(cause, ErrCommitFailed):
	default:
		err = fmt.Errorf("%w: %v", ErrCommitFailed, cause)
	}
	if b := o.batch; b != nil {
		o.batch = nil
		b.finish(err)
	}
	o.closeStore()
	o.inst, o.built = nil, false
	removeLocal(o.place.db)
	o.rt.checked.Delete(o.place.db)
	rs := o.rs
	rs.synced, rs.cursor = false, nil
	if errors.Is(cause, ErrFenced) && rs.lease != nil {
		rs.lease.mu.Lock()
		rs.lease.lost = true
		rs.lease.mu.Unlock()
		o.rt.repl.forget(rs.lease)
		rs.lease = nil
		o.rt.log.Warn("another node took the object over: its batch is refused, its local file discarded", "event", "fenced",
			"namespace", o.ns.name, "name", o.name, "error", cause)
	}
	return err
}

// closeStore closes the object's database, if open.
func (o *object) closeStore() {
	if o.store != nil {
		o.store.Close()
		o.store = nil
		o.hasStore.Store(false)
		o.rt.stats.openDBs.Add(-1)
	}
}

// maybeSnapshot writes a snapshot once the log holds SnapshotEvery records since the last one: the
// database file as a blob, a snapshot record pointing at it, then the records before it trimmed and
// the previous blob deleted. It runs holding the gate, after the batch's output is released; a
// failure is logged and tried again at the next commit.
func (o *object) maybeSnapshot() {
	rs := o.rs
	if rs == nil || o.store == nil || !rs.synced || rs.records < o.rt.repl.cfg.SnapshotEvery {
		return
	}
	if err := o.snapshot(); err != nil {
		if errors.Is(err, ErrFenced) {
			o.discard(err)
			return
		}
		o.rt.log.Warn("an object's snapshot failed", "event", "snapshot_failed", "namespace", o.ns.name, "name", o.name, "error", err)
	}
}

func (o *object) snapshot() error {
	rs, log := o.rs, o.rt.repl.cfg.Log
	if err := o.store.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return err
	}
	var err error
	if rs.cursor, err = walship.NewCursor(o.place.db + "-wal"); err != nil {
		return err
	}
	f, err := os.Open(o.place.db) // streamed: a large database is not read into memory
	if err != nil {
		return err
	}
	defer f.Close()
	var rnd [8]byte
	rand.Read(rnd[:])
	info := snapshotInfo{Blob: rs.key + "/snapshot-" + hex.EncodeToString(rnd[:])}
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(f, h)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*replOpTimeout)
	defer cancel()
	if rs.snapBlob == "" { // a file caught up from the log read no snapshot record: the log's first one names it
		if rs.snapBlob, err = o.firstSnapshot(ctx); err != nil {
			return fmt.Errorf("find the previous snapshot: %w", err)
		}
	}
	if err := log.PutBlob(ctx, info.Blob, cr); err != nil {
		return fmt.Errorf("store the snapshot: %w", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != cr.n {
		log.DeleteBlob(ctx, info.Blob)
		return fmt.Errorf("store the snapshot: the log took %d bytes of the database file (%v)", cr.n, err)
	}
	info.Size = cr.n
	copy(info.SHA256[:], h.Sum(nil))
	r := record{kind: recSnapshot, epoch: rs.epoch, batch: newBatchID(), prev: rs.sum, payload: info.encode()}
	seq, err := o.appendOne(rs.seq, r.encode())
	if errors.Is(err, ErrCommitUnknown) {
		// The record may be in: its blob stays (a node rebuilding from the log needs it), and the
		// log is read again before the next commit, to learn where it is.
		rs.synced = false
		return err
	}
	if err != nil {
		log.DeleteBlob(ctx, info.Blob)
		return err
	}
	rs.seq, rs.sum, rs.records = seq, r.sum, 0
	old := rs.snapBlob
	rs.snapBlob = info.Blob
	if err := log.Trim(ctx, rs.key, seq); err != nil {
		return fmt.Errorf("trim the log before the snapshot: %w", err)
	}
	if old != "" && old != info.Blob {
		if err := log.DeleteBlob(ctx, old); err != nil && !errors.Is(err, ErrNoObject) {
			return fmt.Errorf("delete the previous snapshot: %w", err)
		}
	}
	o.rt.repl.snapshots.Add(1)
	return nil
}

// firstSnapshot returns the blob that the object's log's first record names if it is a snapshot
// record, as it is once the records before the last snapshot are trimmed; "" otherwise.
func (o *object) firstSnapshot(ctx context.Context) (string, error) {
	var blob string
	err := o.rt.repl.cfg.Log.Read(ctx, o.rs.key, 0, func(_ uint64, b []byte) error {
		if r, err := decodeRecord(b); err == nil && r.kind == recSnapshot {
			if info, err := decodeSnapshot(r.payload); err == nil {
				blob = info.Blob
			}
		}
		return errFirstRead
	})
	if errors.Is(err, errFirstRead) {
		err = nil
	}
	return blob, err
}
