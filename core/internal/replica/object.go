package replica

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/core/internal/walship"
	"github.com/durable-go/durable/internal/logrecord"
)

// Host is the runtime's object as an Object sees it: the object's database, which the runtime
// opens, counts and closes. Its methods are called by the gate holder, from the Object's methods.
type Host interface {
	// OpenDB opens the object's local file, checked as the runtime checks any; fresh says it is new.
	OpenDB() (st *sqlstore.DB, fresh bool, err error)
	// AdoptDB makes st, opened by OpenDB and told to Opened, the object's database.
	AdoptDB(st *sqlstore.DB, fresh bool)
	// CloseDB closes the object's database, if one is open.
	CloseDB()
	// WaitClosed waits for an eviction of the same object to have closed its file.
	WaitClosed()
	// Replaced says that the local file was replaced or removed: it must pass its check again.
	Replaced()
	// Indexed says that the object's database (open, if it has one) was rebuilt or caught up from
	// the log: the runtime's catalog and alarm index learn of it as it now is.
	Indexed()
}

// Object is one object's side of cluster mode (or one facet's: facets.go), touched by the gate
// holder only; what it shares with the object's facets is in its logState.
type Object struct {
	n     *Node
	log   *logState // the object's log as this node appends to it, shared with its facets
	key   string    // the object's log key: "namespace/name" (a facet's object's)
	db    string    // the database: "" for the object's own, a facet's path below its facets directory
	shard int       // its shard, whose lease this node must hold to serve it
	path  string    // its local file
	ns    string    // for logs
	name  string

	lease    *lease // its shard's lease, held for it while the object is resident here
	gen      uint64 // the log's gen at which the local file was brought to the log's head; 0: not
	cursor   *walship.Cursor
	shipFull bool              // the local file holds pages that no record has (a new file): ship it whole
	pending  logrecord.BatchID // the batch id the open batch writes in its position row
	drops    []string          // facet directories the open batch deleted: its record drops them
}

// Object returns the cluster side of the object ns/name, whose local file is at path.
func (n *Node) Object(ns, name, path string) *Object {
	key := ns + "/" + name
	return &Object{n: n, log: n.attach(key), key: key, shard: n.cfg.Log.ShardOf(key), path: path, ns: ns, name: name}
}

// synced reports whether the local file is at the log's head and this node's epoch record is in.
func (x *Object) synced() bool {
	x.log.mu.Lock()
	defer x.log.mu.Unlock()
	return x.syncedLocked()
}

func (x *Object) syncedLocked() bool {
	lg := x.log
	return x.lease != nil && lg.open == x.lease && x.gen == lg.gen
}

// Claim makes the object servable by this node for one turn: its shard's lease held (taken, or
// proven valid), its local file at the log's head, this node's epoch record appended. *NotOwner
// while another node holds a valid lease of the shard, or while this node hands the shard over;
// ErrFenced if this node's lease was taken over (the caller then fails the object, and Failed is
// told).
func (x *Object) Claim(h Host) error { return x.claim(h, false) }

// Resume is Claim for a turn that goes on after Await: a turn under way finishes though its shard
// is being handed over.
func (x *Object) Resume(h Host) error { return x.claim(h, true) }

// Shard is the object's shard.
func (x *Object) Shard() int { return x.shard }

func (x *Object) claim(h Host, resume bool) error {
	n := x.n
	if x.lease != nil {
		if to := n.handingTo(x.shard); to != "" && !resume { // no new turn of a shard handed over
			return &NotOwner{Key: x.key, Holder: to, Until: n.cfg.Now()}
		}
		if err := n.check(x.lease); err != nil {
			return err
		}
		if x.synced() {
			return nil
		}
	} else {
		h.WaitClosed()
		l, err := n.acquire(x.shard, x.key)
		if err != nil {
			return err
		}
		x.lease, x.gen = l, 0
	}
	h.CloseDB() // not synced: whatever is open is not known to be at the log's head
	if err := x.openEpoch(h); err != nil {
		// The log could not be read or appended to: let go of the lease (the shard's last object
		// hands it back) rather than hold an object this node cannot serve.
		removeLocal(x.path)
		if rerr := n.unref(x.lease); rerr != nil {
			err = errors.Join(err, rerr)
		}
		x.lease = nil
		return err
	}
	return nil
}

// openEpoch brings the local file to the log's head and appends this node's epoch record, so that an
// append of a former owner, paused meanwhile, fails. A record that lands between the two (that
// former owner's) is read in and the epoch record tried again. If another database of the object
// (the object's, or a facet's) appended this node's epoch record under the same lease, the file is
// only brought to the log's head.
func (x *Object) openEpoch(h Host) error {
	lg := x.log
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.open != nil && lg.open == x.lease {
		if _, err := x.syncLog(h, true); err != nil {
			return err
		}
		x.gen = lg.gen
		h.Indexed()
		return nil
	}
	var err error
	for range 8 {
		var lastEpoch uint64
		if lastEpoch, err = x.syncLog(h, false); err != nil {
			return err
		}
		x.lease.mu.Lock()
		epoch := max(x.lease.rev, lastEpoch+1)
		x.lease.mu.Unlock()
		r := logrecord.Record{Kind: logrecord.Epoch, Epoch: epoch, Batch: logrecord.NewBatchID(), Prev: lg.sum, Payload: []byte(x.n.cfg.Node)}
		var seq uint64
		if seq, err = x.appendOne(lg.seq, r.Encode()); errors.Is(err, ErrFenced) {
			continue
		} else if err != nil {
			return err
		}
		lg.seq, lg.sum, lg.epoch = seq, r.Sum, epoch
		lg.records++
		lg.open = x.lease
		lg.gen++
		x.gen = lg.gen
		h.Indexed()
		return nil
	}
	return fmt.Errorf("%w: the log of %s kept moving while this node took it over: %w", ErrLeaseUnproven, x.key, err)
}

// syncLog brings the local file to the log's head: from where the file says it is (the position row
// its last commit wrote), or, if the file is missing, damaged or ahead of the log (it committed a
// batch whose record never made it), rebuilt from the latest snapshot and the records after it. The
// file is left open as the object's database, if there is one. It returns the last epoch the log
// holds. joined says this node's epoch record is in (another database of the object appended it):
// the log's head must then be the one this node knows, or another node wrote meanwhile.
func (x *Object) syncLog(h Host, joined bool) (uint64, error) {
	h.CloseDB()
	why := "no local file with a position in the log"
	if st, prev, batch, recs, ok := x.openLocal(h); ok {
		end, at, st, err := x.replay(h, prev, &batch, st)
		if err != nil || !at {
			if st != nil {
				st.Close()
			}
		}
		if err == nil && at {
			err = x.reached(end, recs, joined)
		}
		if err != nil {
			return end.epoch, err
		}
		if at {
			return end.epoch, x.adopt(h, st)
		}
		why = "the local file is not at a record of the log"
	}
	x.n.cfg.Logger.Debug("an object is rebuilt from its log", "event", "cluster_rebuild", "namespace", x.ns, "name", x.name, "db", x.db, "reason", why)
	end, _, _, err := x.replay(h, 0, nil, nil)
	if err == nil {
		err = x.reached(end, 0, joined)
	}
	if err != nil {
		return end.epoch, err
	}
	return end.epoch, x.adopt(h, nil)
}

// reached takes in where a read of the log ended: the log's head, the records since the last
// snapshot (counted from recs, the records before the file's position, if the read began there).
func (x *Object) reached(end logEnd, recs int, joined bool) error {
	lg := x.log
	if end.facets {
		lg.facets = true
	}
	if joined {
		if end.seq != lg.seq {
			return fmt.Errorf("%w: the log of %s moved on (at %d, not %d)", ErrFenced, x.key, end.seq, lg.seq)
		}
		return nil
	}
	lg.seq, lg.sum = end.seq, end.sum
	if end.snapped || recs == 0 { // else the blobs are those known before, or the log's first record names them
		lg.blobs = end.blobs
	}
	if end.seq == 0 {
		lg.sum = 0
	}
	if end.snapped {
		lg.records = end.records
	} else {
		lg.records = recs + end.records
	}
	return nil
}

// openLocal opens the local file and reads its position row: the sequence its last commit's record
// was appended after, that commit's batch id, and the records the log held before it since the
// last snapshot.
func (x *Object) openLocal(h Host) (st *sqlstore.DB, prev uint64, batch logrecord.BatchID, records int, ok bool) {
	if _, err := os.Stat(x.path); err != nil {
		removeLocal(x.path) // a WAL left without its database
		return nil, 0, batch, 0, false
	}
	st, fresh, err := h.OpenDB()
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
func (x *Object) adopt(h Host, st *sqlstore.DB) error {
	fresh := false
	if st == nil {
		if _, err := os.Stat(x.path); err != nil {
			return nil // no file: the first turn that uses storage makes one
		}
		var err error
		if st, fresh, err = h.OpenDB(); err != nil {
			return fmt.Errorf("core: open database: %w", err)
		}
	}
	if err := x.Opened(fresh); err != nil {
		st.Close()
		return fmt.Errorf("core: open database: %w", err)
	}
	h.AdoptDB(st, fresh)
	return nil
}

// Opened is told that the object's database was opened: the cursor starts at the log's end. A new
// file (from the template) holds pages no record has: the next commit ships it whole.
func (x *Object) Opened(fresh bool) error {
	if err := x.follow(); err != nil {
		return err
	}
	x.shipFull = x.shipFull || fresh
	return nil
}

// follow places a new cursor at the end of the local file's write-ahead log, closing the one before.
func (x *Object) follow() error {
	x.unfollow()
	c, err := walship.NewCursor(x.path + "-wal")
	if err != nil {
		return err
	}
	x.cursor = c
	return nil
}

// unfollow closes the cursor, if there is one: the database it followed was closed or discarded.
func (x *Object) unfollow() {
	x.cursor.Close()
	x.cursor = nil
}

// Servable refuses storage to a turn that goes on after its object was discarded (fenced, or its
// commit failed): only a new turn, which claims the object again, may open it.
func (x *Object) Servable() error {
	switch {
	case x.lease == nil:
		return fmt.Errorf("%w: this node no longer owns %s", ErrFenced, x.key)
	case !x.synced():
		return fmt.Errorf("%w: %s must be claimed again by a new turn", ErrLeaseUnproven, x.key)
	}
	return nil
}

// Prepare runs before the batch's local COMMIT: the lease must be valid, and a batch that wrote
// records its position in the log (the sequence its record follows, its batch id), so that a
// restart can tell a file at a record from one ahead of the log, and the records since the last
// snapshot, so that a file caught up from the log goes on counting them.
func (x *Object) Prepare(st *sqlstore.DB, dirty bool) error {
	if err := x.Servable(); err != nil {
		return err
	}
	if err := x.n.check(x.lease); err != nil {
		return err
	}
	if !dirty {
		return nil
	}
	x.pending = logrecord.NewBatchID()
	x.log.mu.Lock()
	seq, records := x.log.seq, x.log.records
	x.log.mu.Unlock()
	return st.ExecOwn(`REPLACE INTO main._durable_meta(k, v) VALUES ('log_prev', ?), ('log_batch', ?), ('log_records', ?)`,
		int64(seq), x.pending[:], records)
}

// DropFacets is told that the open batch deletes the facets below dir (a path below the object's
// facets directory, ending in "/"; "" for all): the batch's record says so, and a facet's database
// read from the log after it starts empty.
func (x *Object) DropFacets(dir string) { x.drops = append(x.drops, filepath.ToSlash(dir)) }

// Ship appends what the local COMMIT wrote to the object's log, as one commit's records, before the
// batch's output is released.
func (x *Object) Ship(st *sqlstore.DB, dirty bool) error {
	drops := x.drops
	x.drops = nil
	var c *walship.Commit
	var err error
	if x.shipFull {
		if err = st.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)"); err == nil {
			if c, err = walship.Image(x.path); err == nil {
				err = x.follow()
			}
		}
	} else {
		c, err = x.cursor.Next()
	}
	if err != nil {
		return err
	}
	if c == nil {
		return nil // the batch wrote nothing
	}
	id := x.pending
	if !dirty {
		id = logrecord.NewBatchID()
	}
	lg := x.log
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if !x.syncedLocked() { // another database of the object found the log moved: this file may be behind it
		return fmt.Errorf("%w: %s must be claimed again by a new turn", ErrLeaseUnproven, x.key)
	}
	recs := commitRecords(c, commitHead{DB: x.db, Drops: drops}, lg.epoch, id, lg.sum)
	for _, rec := range recs {
		seq, err := x.appendOne(lg.seq, rec)
		if err != nil {
			return err
		}
		lg.seq = seq
		lg.sum = recordSumOf(rec)
	}
	if x.db != "" || len(drops) > 0 {
		lg.facets = true
	}
	x.shipFull = false
	lg.records += len(recs)
	x.n.shipped(c, recs)
	return nil
}

func recordSumOf(rec []byte) uint64 {
	r, _ := logrecord.Decode(rec)
	return r.Sum
}

// appendOne appends rec after expect and resolves an outcome the log could not tell: by reading the
// log's head (is it rec?), and appending again while the head has not moved, a few times. It fails
// with ErrFenced if another writer appended, and with ErrCommitUnknown if the outcome stays unknown.
func (x *Object) appendOne(expect uint64, rec []byte) (uint64, error) {
	log, key := x.n.cfg.Log, x.key
	var lastErr error
	for try := range 4 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 20 * time.Millisecond)
		}
		ctx, cancel := opCtx()
		seq, err := log.Append(ctx, key, expect, rec)
		cancel()
		if err == nil {
			return seq, nil
		}
		lastErr = err
		ctx, cancel = opCtx()
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
			seq, in, rerr := x.landedAfter(expect, rec)
			switch {
			case rerr != nil:
				lastErr = errors.Join(err, rerr)
				continue
			case in:
				return seq, nil
			}
			return 0, fmt.Errorf("%w: the log of %s moved on (at %d, not %d): %w", ErrFenced, key, head, expect, err)
		}
	}
	return 0, fmt.Errorf("%w: append to the log of %s: %w", ErrCommitUnknown, key, lastErr)
}

// errFirstRead stops a Read at its first record.
var errFirstRead = errors.New("core: first record read")

// landedAfter reports whether rec is the record right after expect in the object's log, where an
// append expecting expect lands if it lands at all.
func (x *Object) landedAfter(expect uint64, rec []byte) (seq uint64, in bool, err error) {
	ctx, cancel := opCtx()
	defer cancel()
	err = x.n.cfg.Log.Read(ctx, x.key, expect, func(s uint64, r []byte) error {
		seq, in = s, bytes.Equal(r, rec)
		return errFirstRead
	})
	if errors.Is(err, errFirstRead) {
		err = nil
	}
	return seq, in, err
}

// Failed is told that the object failed (its batch abandoned, its database closed, its instance
// dropped) for cause: the local file is deleted, since it may be ahead of the log, which rebuilds
// it. If another node took the object over (ErrFenced), its lease is forgotten too, and the object's
// facets here read the log again before their next commit.
func (x *Object) Failed(h Host, cause error) {
	removeLocal(x.path)
	h.Replaced()
	x.gen, x.drops = 0, nil
	x.unfollow()
	if errors.Is(cause, ErrFenced) && x.lease != nil {
		x.log.mu.Lock()
		if x.log.open == x.lease {
			x.log.open = nil
		}
		x.log.mu.Unlock()
		x.lease.mu.Lock()
		x.lease.lost = true
		x.lease.mu.Unlock()
		x.n.forget(x.lease)
		x.n.unref(x.lease) // lost: nothing to hand back
		x.lease = nil
		x.n.cfg.Logger.Warn("another node took the object over: its batch is refused, its local file discarded", "event", "fenced",
			"namespace", x.ns, "name", x.name, "db", x.db, "error", cause)
	}
}

// Release lets go of the shard's lease, if this node holds it for the object (the object was
// evicted): the shard's last resident object hands the lease back, and another node may take the
// shard at once. The Object is not used again.
func (x *Object) Release() error {
	x.unfollow() // the database is closed
	if x.log != nil {
		x.n.detach(x.key, x.log)
		x.log = &logState{} // a stale turn of a dropped Object appends nothing through the shared one
	}
	if x.lease == nil {
		return nil
	}
	l := x.lease
	x.lease, x.gen = nil, 0
	return x.n.unref(l)
}
