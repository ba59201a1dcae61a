package replica

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/internal/logrecord"
	"github.com/durable-go/durable/replog"
)

// Committed is told that a batch committed and its output was released; st is the object's
// database. Once the log holds SnapshotEvery records since the last snapshot, it writes one: the
// database file as a blob (each database's, for an object with facets), a snapshot record pointing
// at it, then the records before it trimmed and the previous blobs deleted. A failure is logged and
// tried again at the next commit, except ErrFenced, which it returns: the caller fails the object.
func (x *Object) Committed(st *sqlstore.DB) error {
	lg := x.log
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if st == nil || !x.syncedLocked() || lg.records < x.n.cfg.SnapshotEvery {
		return nil
	}
	if err := x.snapshot(st); err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		x.n.cfg.Logger.Warn("an object's snapshot failed", "event", "snapshot_failed", "namespace", x.ns, "name", x.name, "error", err)
	}
	return nil
}

// snapshot writes a snapshot, with x.log.mu held. An object whose log holds facets' records is
// snapshotted from the log itself, each database built as a node taking it over would build it:
// the object and its facets run their turns apart, so their files are never at one record together
// on their own. Otherwise the object's own file is the snapshot.
func (x *Object) snapshot(st *sqlstore.DB) error {
	lg := x.log
	ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
	defer cancel()
	if !lg.facets && lg.scanned != lg.open { // once per lease: only this node appends meanwhile, and Ship notes a facet's record
		found, err := x.hasFacets(ctx)
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		lg.facets, lg.scanned = found, lg.open
	}
	var snaps []dbSnapshot
	var err error
	if lg.facets {
		snaps, err = x.snapshotLog(ctx)
	} else {
		snaps, err = x.snapshotFile(ctx, st)
	}
	if err != nil {
		return err
	}
	drop := func() {
		for _, s := range snaps {
			x.n.cfg.Log.DeleteBlob(ctx, x.key, s.Info.Blob)
		}
	}
	if len(lg.blobs) == 0 { // a file caught up from the log read no snapshot record: the log's first one names them
		if lg.blobs, err = x.firstSnapshot(ctx); err != nil {
			drop()
			return fmt.Errorf("find the previous snapshot: %w", err)
		}
	}
	r := logrecord.Record{Kind: logrecord.Snapshot, Epoch: lg.epoch, Batch: logrecord.NewBatchID(), Prev: lg.sum}
	if lg.facets {
		r.Flags, r.Payload = logrecord.Tagged, encodeSnapshots(snaps)
	} else {
		r.Payload = snaps[0].Info.encode()
	}
	seq, err := x.appendOne(lg.seq, r.Encode())
	if errors.Is(err, ErrCommitUnknown) {
		// The record may be in: its blobs stay (a node rebuilding from the log needs them), and the
		// log is read again before the next commit, to learn where it is.
		lg.open = nil
		return err
	}
	if err != nil {
		drop()
		return err
	}
	lg.seq, lg.sum, lg.records = seq, r.Sum, 0
	old := lg.blobs
	lg.blobs = nil
	for _, s := range snaps {
		lg.blobs = append(lg.blobs, s.Info.Blob)
	}
	// The snapshot is in. What follows is clean-up, which the next snapshot does again if it fails
	// now: it gets opTimeout, not the snapshot's time, so that an engine slow to purge (its meta
	// group without a leader, say) does not hold the object's next turns for long.
	cctx, ccancel := opCtx()
	defer ccancel()
	log := x.n.cfg.Log
	if err := log.Trim(cctx, x.key, seq); err != nil {
		return fmt.Errorf("trim the log before the snapshot: %w", err)
	}
	for _, b := range old {
		if slices.Contains(lg.blobs, b) {
			continue
		}
		if err := log.DeleteBlob(cctx, x.key, b); err != nil && !errors.Is(err, replog.ErrNoBlob) {
			return fmt.Errorf("delete the previous snapshot: %w", err)
		}
	}
	x.n.snapshots.Add(1)
	return nil
}

// snapshotFile stores the object's own database file, st, as a snapshot's blob.
func (x *Object) snapshotFile(ctx context.Context, st *sqlstore.DB) ([]dbSnapshot, error) {
	if err := st.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return nil, err
	}
	if err := x.follow(); err != nil {
		return nil, err
	}
	info, err := x.putBlob(ctx, x.path)
	if err != nil {
		return nil, err
	}
	return []dbSnapshot{{Info: info}}, nil
}

// snapshotLog builds each database of the object (its own, its facets') from the log, in a
// directory of its own, and stores each as a blob. A database with no data is left out.
func (x *Object) snapshotLog(ctx context.Context) ([]dbSnapshot, error) {
	dir, err := os.MkdirTemp("", "durable-snapshot-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var snaps []dbSnapshot
	fail := func(err error) ([]dbSnapshot, error) {
		for _, s := range snaps {
			x.n.cfg.Log.DeleteBlob(ctx, x.key, s.Info.Blob)
		}
		return nil, err
	}
	dbs := []string{""}
	for i := 0; i < len(dbs); i++ {
		db := dbs[i]
		target := filepath.Join(dir, fmt.Sprintf("%d.sqlite", i))
		end, err := x.build(target, &db)
		if err != nil {
			return fail(fmt.Errorf("read the log: %w", err))
		}
		if end.seq != x.log.seq {
			return fail(fmt.Errorf("%w: the log of %s moved on (at %d, not %d)", ErrFenced, x.key, end.seq, x.log.seq))
		}
		if i == 0 {
			for _, d := range end.dbs {
				if d != "" {
					dbs = append(dbs, d)
				}
			}
		}
		if !end.data {
			continue
		}
		info, err := x.putBlob(ctx, target)
		if err != nil {
			return fail(err)
		}
		snaps = append(snaps, dbSnapshot{DB: db, Info: info})
	}
	return snaps, nil
}

// putBlob stores the file at path as a new blob of the object's, streamed (a large database is not
// read into memory).
func (x *Object) putBlob(ctx context.Context, path string) (snapshotInfo, error) {
	log := x.n.cfg.Log
	f, err := os.Open(path)
	if err != nil {
		return snapshotInfo{}, err
	}
	defer f.Close()
	var rnd [8]byte
	rand.Read(rnd[:])
	info := snapshotInfo{Blob: x.key + "/snapshot-" + hex.EncodeToString(rnd[:])}
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(f, h)}
	if err := log.PutBlob(ctx, x.key, info.Blob, cr); err != nil {
		return info, fmt.Errorf("store the snapshot: %w", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != cr.n {
		log.DeleteBlob(ctx, x.key, info.Blob)
		return info, fmt.Errorf("store the snapshot: the log took %d bytes of the database file (%v)", cr.n, err)
	}
	info.Size = cr.n
	copy(info.SHA256[:], h.Sum(nil))
	return info, nil
}

// firstSnapshot returns the blobs that the object's log's first record names if it is a snapshot
// record, as it is once the records before the last snapshot are trimmed; none otherwise.
func (x *Object) firstSnapshot(ctx context.Context) ([]string, error) {
	var blobs []string
	err := x.n.cfg.Log.Read(ctx, x.key, 0, func(_ uint64, b []byte) error {
		if r, err := logrecord.Decode(b); err == nil && r.Kind == logrecord.Snapshot {
			if snaps, err := snapshotsOf(r); err == nil {
				for _, s := range snaps {
					blobs = append(blobs, s.Info.Blob)
				}
			}
		}
		return errFirstRead
	})
	if errors.Is(err, errFirstRead) {
		err = nil
	}
	return blobs, err
}
