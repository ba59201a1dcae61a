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

	"github.com/durable-go/durable/core/internal/sqlstore"
	"github.com/durable-go/durable/internal/logrecord"
	"github.com/durable-go/durable/replog"
)

// Committed is told that a batch committed and its output was released; st is the object's
// database. Once the log holds SnapshotEvery records since the last snapshot, it writes one: the
// database file as a blob, a snapshot record pointing at it, then the records before it trimmed and
// the previous blob deleted. A failure is logged and tried again at the next commit, except
// ErrFenced, which it returns: the caller fails the object.
func (x *Object) Committed(st *sqlstore.DB) error {
	if st == nil || !x.synced || x.records < x.n.cfg.SnapshotEvery {
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

func (x *Object) snapshot(st *sqlstore.DB) error {
	log := x.n.cfg.Log
	if err := st.ExecOwn("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return err
	}
	if err := x.follow(); err != nil {
		return err
	}
	f, err := os.Open(x.path) // streamed: a large database is not read into memory
	if err != nil {
		return err
	}
	defer f.Close()
	var rnd [8]byte
	rand.Read(rnd[:])
	info := snapshotInfo{Blob: x.key + "/snapshot-" + hex.EncodeToString(rnd[:])}
	h := sha256.New()
	cr := &countReader{r: io.TeeReader(f, h)}
	ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
	defer cancel()
	if x.snapBlob == "" { // a file caught up from the log read no snapshot record: the log's first one names it
		if x.snapBlob, err = x.firstSnapshot(ctx); err != nil {
			return fmt.Errorf("find the previous snapshot: %w", err)
		}
	}
	if err := log.PutBlob(ctx, x.key, info.Blob, cr); err != nil {
		return fmt.Errorf("store the snapshot: %w", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != cr.n {
		log.DeleteBlob(ctx, x.key, info.Blob)
		return fmt.Errorf("store the snapshot: the log took %d bytes of the database file (%v)", cr.n, err)
	}
	info.Size = cr.n
	copy(info.SHA256[:], h.Sum(nil))
	r := logrecord.Record{Kind: logrecord.Snapshot, Epoch: x.epoch, Batch: logrecord.NewBatchID(), Prev: x.sum, Payload: info.encode()}
	seq, err := x.appendOne(x.seq, r.Encode())
	if errors.Is(err, ErrCommitUnknown) {
		// The record may be in: its blob stays (a node rebuilding from the log needs it), and the
		// log is read again before the next commit, to learn where it is.
		x.synced = false
		return err
	}
	if err != nil {
		log.DeleteBlob(ctx, x.key, info.Blob)
		return err
	}
	x.seq, x.sum, x.records = seq, r.Sum, 0
	old := x.snapBlob
	x.snapBlob = info.Blob
	// The snapshot is in. What follows is clean-up, which the next snapshot does again if it fails
	// now: it gets opTimeout, not the snapshot's time, so that an engine slow to purge (its meta
	// group without a leader, say) does not hold the object's next turns for long.
	cctx, ccancel := opCtx()
	defer ccancel()
	if err := log.Trim(cctx, x.key, seq); err != nil {
		return fmt.Errorf("trim the log before the snapshot: %w", err)
	}
	if old != "" && old != info.Blob {
		if err := log.DeleteBlob(cctx, x.key, old); err != nil && !errors.Is(err, replog.ErrNoBlob) {
			return fmt.Errorf("delete the previous snapshot: %w", err)
		}
	}
	x.n.snapshots.Add(1)
	return nil
}

// firstSnapshot returns the blob that the object's log's first record names if it is a snapshot
// record, as it is once the records before the last snapshot are trimmed; "" otherwise.
func (x *Object) firstSnapshot(ctx context.Context) (string, error) {
	var blob string
	err := x.n.cfg.Log.Read(ctx, x.key, 0, func(_ uint64, b []byte) error {
		if r, err := logrecord.Decode(b); err == nil && r.Kind == logrecord.Snapshot {
			if info, err := decodeSnapshot(r.Payload); err == nil {
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
