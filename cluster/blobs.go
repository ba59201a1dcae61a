package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/durable-go/durable/replog"
)

// A blob lives in its key's shard stream, read by direct gets like the records (no consumer, so
// no part for the JetStream meta leader): its bytes in chunks of up to blobChunk bytes on
// "<prefix>.log.<n>.b.<name>.c.<id>", then a manifest on "<prefix>.log.<n>.b.<name>.m" that names
// the blob's id, size, number of chunks, first chunk's sequence and SHA-256, and rolls the
// manifest's subject up. Once the manifest is written, the name's older chunks are purged. Each
// message carries a message id of its own, so that one sent again after its acknowledgement was
// lost is stored once.
const blobChunk = 256 << 10

// maxBlobName bounds a blob's name: its subject token (base64, a third longer) must fit a
// subject with room to spare (4 KiB).
const maxBlobName = 2048

type manifest struct {
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	First  uint64 `json:"first"` // the first chunk's sequence; 0 if there is none
	SHA256 string `json:"sha256"`
}

// blobWhere returns the stream, subject base ("<prefix>.log.<n>.b.<name>.") and barrier of a
// blob of key's.
func (e *Engine) blobWhere(key, name string) (stream, base, barrier string, err error) {
	if _, err := encodeKey(key); err != nil {
		return "", "", "", err
	}
	if name == "" {
		return "", "", "", errors.New("empty name")
	}
	if len(name) > maxBlobName {
		return "", "", "", fmt.Errorf("a name of %d bytes: at most %d", len(name), maxBlobName)
	}
	shard := e.ShardOf(key)
	return e.streamName(shard), e.subjectBase(shard) + "b." + base64.RawURLEncoding.EncodeToString([]byte(name)) + ".",
		e.barrier(shard), nil
}

// PutBlob implements replog.Log. A failed read of r leaves the name as it was.
func (e *Engine) PutBlob(ctx context.Context, key, name string, r io.Reader) error {
	stream, base, _, err := e.blobWhere(key, name)
	if err != nil {
		return fmt.Errorf("cluster: put blob: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	mf := manifest{ID: nuid.Next()}
	chunks := base + "c." + mf.ID
	h := sha256.New()
	buf := make([]byte, blobChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			seq, err := e.publishOnce(ctx, &nats.Msg{Subject: chunks, Data: buf[:n]}, fmt.Sprintf("%s.%d", mf.ID, mf.Chunks))
			if err != nil {
				e.dropChunks(stream, chunks)
				return fmt.Errorf("cluster: put blob %q: chunk %d: %w", name, mf.Chunks, err)
			}
			if mf.Chunks == 0 {
				mf.First = seq
			}
			mf.Chunks++
			mf.Size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			e.dropChunks(stream, chunks)
			return fmt.Errorf("cluster: put blob %q: reading it: %w", name, rerr)
		}
	}
	mf.SHA256 = hex.EncodeToString(h.Sum(nil))
	data, _ := json.Marshal(mf)
	m := &nats.Msg{Subject: base + "m", Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	seq, err := e.publishOnce(ctx, m, mf.ID+".m")
	if err != nil {
		return fmt.Errorf("cluster: put blob %q: manifest: %w", name, err)
	}
	before := mf.First
	if before == 0 {
		before = seq
	}
	if err := e.purge(ctx, stream, base+"c.*", before); err != nil {
		return fmt.Errorf("cluster: put blob %q: stored, but its older chunks were not purged: %w", name, err)
	}
	return nil
}

// publishOnce publishes m with message id id, sending it again after an acknowledgement that did
// not come (the stream stores one message per id within its duplicates window, two minutes), until
// ctx ends, and returns its sequence.
func (e *Engine) publishOnce(ctx context.Context, m *nats.Msg, id string) (uint64, error) {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ack, err := e.publish(ctx, m, jetstream.WithMsgID(id))
		if err == nil {
			return ack.Sequence, nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) || errors.Is(err, nats.ErrConnectionClosed) {
			return 0, err
		}
		if serr := sleep(ctx, wait); serr != nil {
			return 0, fmt.Errorf("%w (%w)", err, serr)
		}
	}
}

// dropChunks purges the chunks of a blob whose put failed, as well as it can: chunks left behind
// are purged by the name's next put or delete.
func (e *Engine) dropChunks(stream, subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.AttemptTimeout)
	defer cancel()
	_ = e.purge(ctx, stream, subject, 0)
}

// GetBlob implements replog.Log. It reads the manifest through the quorum (as Last does), then the
// chunks in batches from whichever replica answers, waiting for one that is behind to catch up,
// and checks the blob's size and digest.
func (e *Engine) GetBlob(ctx context.Context, key, name string, w io.Writer) error {
	stream, base, barrier, err := e.blobWhere(key, name)
	if err != nil {
		return fmt.Errorf("cluster: get blob: %w: %w", err, replog.ErrNoBlob)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	mf, mseq, err := e.manifest(ctx, stream, base, barrier)
	if err != nil {
		return fmt.Errorf("cluster: get blob %q: %w", name, err)
	}
	if mseq == 0 {
		return fmt.Errorf("cluster: get blob %q: %w", name, replog.ErrNoBlob)
	}
	h := sha256.New()
	if err := e.readChunks(ctx, stream, base, barrier, mf, mseq, io.MultiWriter(w, h)); err != nil {
		return fmt.Errorf("cluster: get blob %q: %w", name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != mf.SHA256 {
		return fmt.Errorf("cluster: get blob %q: SHA-256 %s, want %s", name, got, mf.SHA256)
	}
	return nil
}

// manifest returns a blob's manifest and its sequence, 0 if there is none.
func (e *Engine) manifest(ctx context.Context, stream, base, barrier string) (manifest, uint64, error) {
	seq, _, data, err := e.confirmedLast(ctx, stream, base+"m", barrier)
	if err != nil || seq == 0 {
		return manifest{}, 0, err
	}
	var mf manifest
	if err := json.Unmarshal(data, &mf); err != nil {
		return manifest{}, 0, fmt.Errorf("a damaged manifest at %d: %w", seq, err)
	}
	return mf, seq, nil
}

// readChunks writes the chunks of the blob mf describes to w.
func (e *Engine) readChunks(ctx context.Context, stream, base, barrier string, mf manifest, mseq uint64, w io.Writer) error {
	subject := base + "c." + mf.ID
	var size int64
	next, got := mf.First, 0
	for wait := time.Millisecond; got < mf.Chunks; {
		var recs []record
		err := e.retry(ctx, func(ctx context.Context) (err error) {
			recs, err = e.readBatch(ctx, stream, subject, next, mseq, readBatch)
			return err
		})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			// The replica that answered is behind, or the blob was replaced or deleted meanwhile.
			now, _, err := e.manifest(ctx, stream, base, barrier)
			if err != nil {
				return err
			}
			if now.ID != mf.ID {
				return fmt.Errorf("replaced or deleted while it was read, after %d of %d chunks", got, mf.Chunks)
			}
			if err := sleep(ctx, wait); err != nil {
				return fmt.Errorf("chunk %d of %d did not reach the replicas: %w", got, mf.Chunks, err)
			}
			wait = min(2*wait, 50*time.Millisecond)
			continue
		}
		wait = time.Millisecond
		for _, r := range recs {
			if got == mf.Chunks {
				return fmt.Errorf("more than the %d chunks the manifest names", mf.Chunks)
			}
			if _, err := w.Write(r.data); err != nil {
				return err
			}
			size += int64(len(r.data))
			got++
		}
		next = recs[len(recs)-1].seq + 1
	}
	if size != mf.Size {
		return fmt.Errorf("%d bytes, want %d", size, mf.Size)
	}
	return nil
}

// DeleteBlob implements replog.Log: a purge of the name's manifest and chunks. Deleting a blob
// that is not there is not an error.
func (e *Engine) DeleteBlob(ctx context.Context, key, name string) error {
	stream, base, _, err := e.blobWhere(key, name)
	if err != nil {
		return fmt.Errorf("cluster: delete blob: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.purge(ctx, stream, base+">", 0); err != nil {
		return fmt.Errorf("cluster: delete blob %q: %w", name, err)
	}
	return nil
}
