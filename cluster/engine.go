package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/durable-go/durable/replog"
)

// Config configures an Engine.
type Config struct {
	// Replicas is how many nodes keep each stream, bucket and blob (default 3). An append is
	// acknowledged once a majority of them have it on disk. Use 1 for a 1-node cluster.
	Replicas int

	// Shards is how many streams the log is spread over (default 16), each key going to one by a
	// hash of its name. It must stay the same for the life of the data: a different number would
	// look for keys in the wrong streams.
	Shards int

	// Prefix names the engine's streams, subjects and buckets (default "durable"), so that several
	// engines can share one JetStream cluster. Letters, digits, '_' and '-' only.
	Prefix string

	// Timeout bounds each operation whose context has no deadline (default 10 s), and each attempt
	// of New at making one stream or bucket ready.
	Timeout time.Duration

	// Logger, if set, receives what New waits for while JetStream is not ready; nil keeps it quiet.
	Logger *slog.Logger
}

// MaxRecord is the largest record Append accepts: a node's maximum payload (MaxPayload) less room
// for the subject and headers.
const MaxRecord = MaxPayload - 64<<10

// Engine keeps a replog.Log and replog.Leases in a JetStream cluster: one stream per shard of the log
// (one subject per key), a key-value bucket of leases and an object store of blobs, all replicated
// Replicas times. It is safe for concurrent use. It does not own the connection it was given.
type Engine struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	cfg       Config
	apiPfx    string
	kvName    string // the key-value bucket of leases
	kvStrm    string // its stream
	objBucket string
	objects   jetstream.ObjectStore
}

var (
	_ replog.Log    = (*Engine)(nil)
	_ replog.Leases = (*Engine)(nil)
)

// New makes the engine's streams and buckets ready over nc and returns the engine. Each is
// created if it is missing, updated if its settings are not the engine's and left alone otherwise,
// and has a leader that answers before New returns. On a cluster that has just started (no quorum
// yet) New keeps trying, each stream or bucket on its own and each attempt bounded by
// Config.Timeout, until all are ready or ctx ends, and logs to Config.Logger what it waits for
// (how many are ready, which are not, the last error). Nodes that start together may all call
// New at once.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Engine, error) {
	if nc == nil {
		return nil, errors.New("cluster: New: nil connection")
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "durable"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Replicas < 1 || cfg.Replicas > 5:
		return nil, fmt.Errorf("cluster: New: Replicas %d: want 1 to 5", cfg.Replicas)
	case cfg.Shards < 1 || cfg.Shards > 1024:
		return nil, fmt.Errorf("cluster: New: Shards %d: want 1 to 1024", cfg.Shards)
	case !validToken(cfg.Prefix):
		return nil, fmt.Errorf("cluster: New: Prefix %q: letters, digits, '_' and '-' only", cfg.Prefix)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("cluster: New: Timeout %v is negative", cfg.Timeout)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: New: %w", err)
	}
	e := &Engine{nc: nc, js: js, cfg: cfg, apiPfx: "$JS.API", kvName: cfg.Prefix + "_leases"}
	e.kvStrm = "KV_" + e.kvName
	e.objBucket = cfg.Prefix + "_blobs"
	if err := e.setUp(ctx); err != nil {
		return nil, fmt.Errorf("cluster: New: %w", err)
	}
	return e, nil
}

func (e *Engine) streamName(shard int) string { return e.cfg.Prefix + "_log_" + strconv.Itoa(shard) }

func (e *Engine) subjectBase(shard int) string {
	return e.cfg.Prefix + ".log." + strconv.Itoa(shard) + "."
}

// where returns the stream and subject of key's records, and the stream's barrier subject.
func (e *Engine) where(key string) (stream, subject, barrier string, err error) {
	enc, err := encodeKey(key)
	if err != nil {
		return "", "", "", err
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	shard := int(h.Sum32() % uint32(e.cfg.Shards))
	base := e.subjectBase(shard)
	// Encoded keys never contain '=' followed by a non-hex character: "=sync" names no key.
	return e.streamName(shard), base + "k." + enc, base + "=sync", nil
}

// maxKey bounds a key: the runtime's keys are a namespace (at most 64 bytes), '/' and an object
// name, at most replog.MaxKeyLen in all.
const maxKey = replog.MaxKeyLen

// encodeKey maps any non-empty key to a subject token and key-value key, one to one: letters,
// digits, '_' and '-' stay, every other byte becomes '=' and two hex digits.
func encodeKey(key string) (string, error) {
	if key == "" {
		return "", errors.New("cluster: empty key")
	}
	if len(key) > maxKey {
		return "", fmt.Errorf("cluster: key of %d bytes: at most %d", len(key), maxKey)
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String(), nil
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.cfg.Timeout)
}

// publishExpecting publishes m if subject's last sequence is expect. A replicated stream refuses
// such a publish without looking at the sequence while an earlier publish to the subject is still
// in flight at its leader (the "wrong last sequence" without a number), even one that has been
// acknowledged already. The refusing leader does not store it, and of two sends that expect the
// same sequence at most one can be stored, so it is sent again, until the sequence can be
// compared or ctx ends.
func (e *Engine) publishExpecting(ctx context.Context, m *nats.Msg, expect uint64) (*jetstream.PubAck, error) {
	wait := 500 * time.Microsecond
	for {
		ack, err := e.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect))
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return ack, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// isConflict reports whether err is JetStream's refusal of an expected last sequence.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Append implements replog.Log. An acknowledgement lost to a timeout or a dropped connection is
// replog.ErrUnknown, never retried into a false conflict or success: the record is sent again only
// after a refusal that stored nothing (no stream to take it, or an earlier append to the key
// still in flight at the leader).
func (e *Engine) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return 0, fmt.Errorf("cluster: append: %w", err)
	}
	if len(rec) > MaxRecord {
		return 0, fmt.Errorf("cluster: append to %q: a record of %d bytes: at most %d", key, len(rec), MaxRecord)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	ack, err := e.publishExpecting(ctx, &nats.Msg{Subject: subject, Data: rec}, expect)
	switch {
	case err == nil:
		return ack.Sequence, nil
	case isConflict(err):
		// During a change of leader, a server that still believes it leads can refuse the
		// append while the new leader stores it, and the refusal may come back first. So a
		// refusal stands only once a read through the quorum shows another record after expect.
		if verr := e.confirmConflict(ctx, stream, subject, barrier, expect, rec); verr != nil {
			return 0, fmt.Errorf("cluster: append to %q expecting %d: refused (%v), but %w: %w", key, expect, err, verr, replog.ErrUnknown)
		}
		return 0, fmt.Errorf("cluster: append to %q expecting %d: %w (%v)", key, expect, replog.ErrConflict, err)
	default:
		return 0, fmt.Errorf("cluster: append to %q expecting %d: %w (%w)", key, expect, replog.ErrUnknown, err)
	}
}

// confirmConflict returns nil if the key's record after expect is there and is not rec (so the
// append that expected it cannot be stored, now or later), and an error saying why not otherwise.
func (e *Engine) confirmConflict(ctx context.Context, stream, subject, barrier string, expect uint64, rec []byte) error {
	last, _, _, err := e.confirmedLast(ctx, stream, subject, barrier)
	switch {
	case err != nil:
		return fmt.Errorf("checking the refusal: %w", err)
	case last == expect:
		return errors.New("the key's last record is still the one expected: the append may yet be stored")
	case last < expect:
		return nil // expect was never a record of the key's
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		recs, err := e.readBatch(ctx, stream, subject, expect+1, last, 1)
		if err != nil {
			return fmt.Errorf("checking the refusal: %w", err)
		}
		if len(recs) > 0 {
			if bytes.Equal(recs[0].data, rec) {
				return fmt.Errorf("the record after %d, at %d, is this one", expect, recs[0].seq)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("checking the refusal: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Last implements replog.Log. The answer is linearizable: it is the key's last record as of a
// barrier written through the stream's quorum after the call, read from a replica that has the
// barrier. A leader cut off from its quorum, that does not know yet that another has replaced it,
// cannot write the barrier, so a stale record is never returned. It costs one small replicated
// write.
func (e *Engine) Last(ctx context.Context, key string) (uint64, []byte, error) {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: last: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	seq, _, data, err := e.confirmedLast(ctx, stream, subject, barrier)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: last of %q: %w", key, err)
	}
	return seq, data, nil
}

// confirmedLast returns subject's last message in stream, as the stream's quorum agrees it is.
// Reading is safe to repeat, so it tries again (each try bounded by attemptTimeout) until ctx ends:
// through a leader election, a stream just created, a node restarting.
func (e *Engine) confirmedLast(ctx context.Context, stream, subject, barrier string) (uint64, nats.Header, []byte, error) {
	wait := time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		seq, hdr, data, err := e.tryConfirmedLast(actx, stream, subject, barrier)
		cancel()
		if err == nil {
			return seq, hdr, data, nil
		}
		select {
		case <-ctx.Done():
			return 0, nil, nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// attemptTimeout bounds one try of a read.
const attemptTimeout = 2 * time.Second

// tryConfirmedLast writes a barrier through the stream's quorum, then asks any replica for the
// subject's last message up to the barrier, from a replica that has the barrier: a replica holds
// only what its quorum committed, in order, so its answer is the subject's last message as of
// the barrier, which lies between the call and the return. (The barrier expects nothing, so it
// never makes an append to the subject fail.)
func (e *Engine) tryConfirmedLast(ctx context.Context, stream, subject, barrier string) (uint64, nats.Header, []byte, error) {
	m := &nats.Msg{Subject: barrier, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgTTLHeader, barrierTTL)
	ack, err := e.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read barrier: %w", err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		found, seq, hdr, data, err := e.lastUpTo(ctx, stream, subject, barrier, ack.Sequence)
		if err != nil || found {
			return seq, hdr, data, err
		}
		// The replica that answered has not applied the barrier yet.
		select {
		case <-ctx.Done():
			return 0, nil, nil, fmt.Errorf("waiting for a replica to apply the read barrier: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// barrierTTL is how long a read barrier stays in its stream: long enough for a replica to apply
// it while a read waits for it (a read's attempt lasts at most attemptTimeout).
const barrierTTL = "30s"

// lastUpTo asks a replica for the last messages up to sequence upTo of subject and barrier; found
// is whether the replica has the barrier message at upTo.
func (e *Engine) lastUpTo(ctx context.Context, stream, subject, barrier string, upTo uint64) (found bool, seq uint64, hdr nats.Header, data []byte, err error) {
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return false, 0, nil, nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(map[string]any{"multi_last": []string{subject, barrier}, "up_to_seq": upTo})
	if err := e.nc.PublishRequest(e.apiPfx+".DIRECT.GET."+stream, inbox, req); err != nil {
		return false, 0, nil, nil, err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return false, 0, nil, nil, fmt.Errorf("direct get: %w", err)
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204", "404", "503": // the end; nothing there; no replica answering yet
				return found, seq, hdr, data, nil
			default:
				return false, 0, nil, nil, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
			}
		}
		mseq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return false, 0, nil, nil, fmt.Errorf("direct get: a message without a sequence: %w", err)
		}
		switch m.Header.Get("Nats-Subject") {
		case barrier:
			found = mseq == upTo
		case subject:
			seq, hdr, data = mseq, m.Header, m.Data
			if data == nil {
				data = []byte{}
			}
		}
	}
}

// readBatch is how many records one round trip of Read brings at most.
const readBatch = 512

// Read implements replog.Log. It finds the key's last record (as Last does), then brings the records
// up to it in batches of up to 512 (one round trip each) from whichever replica answers, waiting
// for a replica that is behind to catch up. fn runs between round trips, under ctx alone.
func (e *Engine) Read(ctx context.Context, key string, after uint64, fn func(uint64, []byte) error) error {
	stream, subject, barrier, err := e.where(key)
	if err != nil {
		return fmt.Errorf("cluster: read: %w", err)
	}
	bctx, cancel := e.bound(ctx)
	until, _, _, err := e.confirmedLast(bctx, stream, subject, barrier)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster: read of %q: %w", key, err)
	}
	next := after + 1
	var behindSince time.Time
	for wait := time.Millisecond; next <= until; {
		bctx, cancel := e.bound(ctx)
		recs, err := e.readBatch(bctx, stream, subject, next, until, readBatch)
		cancel()
		if err != nil {
			return fmt.Errorf("cluster: read of %q: %w", key, err)
		}
		if len(recs) == 0 {
			// The replica that answered has nothing after next yet: it is behind the leader.
			if behindSince.IsZero() {
				behindSince = time.Now()
			} else if time.Since(behindSince) > e.cfg.Timeout {
				return fmt.Errorf("cluster: read of %q: record %d did not reach the replicas within %v", key, until, e.cfg.Timeout)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster: read of %q: %w", key, ctx.Err())
			case <-time.After(wait):
			}
			wait = min(2*wait, 50*time.Millisecond)
			continue
		}
		behindSince, wait = time.Time{}, time.Millisecond
		for _, r := range recs {
			if err := fn(r.seq, r.data); err != nil {
				return err
			}
		}
		next = recs[len(recs)-1].seq + 1
	}
	return nil
}

type record struct {
	seq  uint64
	data []byte
}

// readBatch brings one batch of subject's records from next on, up to until.
func (e *Engine) readBatch(ctx context.Context, stream, subject string, next, until uint64, batch int) ([]record, error) {
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(map[string]any{"seq": next, "next_by_subj": subject, "batch": batch, "max_bytes": MaxPayload})
	if err := e.nc.PublishRequest(e.apiPfx+".DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	var recs []record
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("direct get: %w", err)
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204", "404": // the end of the batch; nothing (more) there
				return recs, nil
			case "503": // no replica answers yet (the stream was just created, or is moving)
				return recs, nil
			default:
				return nil, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("direct get: a message without a sequence: %w", err)
		}
		if seq < next || seq > until {
			continue // past the bound: drain the batch up to its end
		}
		data := m.Data
		if data == nil {
			data = []byte{}
		}
		recs = append(recs, record{seq, data})
	}
}

// Trim implements replog.Log: a purge of key's subject before the sequence, through the stream's
// quorum. Trimming past the last record removes it too, after which the key has no last record.
func (e *Engine) Trim(ctx context.Context, key string, before uint64) error {
	stream, subject, _, err := e.where(key)
	if err != nil {
		return fmt.Errorf("cluster: trim: %w", err)
	}
	if before <= 1 {
		return nil // there is nothing before the first sequence (and a purge at 0 would purge all)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(before))
	}
	if err != nil {
		return fmt.Errorf("cluster: trim of %q before %d: %w", key, before, err)
	}
	return nil
}

// PutBlob implements replog.Log: the blob goes to the object store in chunks, so it may be far
// larger than a message.
func (e *Engine) PutBlob(ctx context.Context, name string, r io.Reader) error {
	if name == "" {
		return errors.New("cluster: put blob: empty name")
	}
	if _, err := e.objects.Put(ctx, jetstream.ObjectMeta{Name: name}, r); err != nil {
		return fmt.Errorf("cluster: put blob %q: %w", name, err)
	}
	return nil
}

// GetBlob implements replog.Log. The object store checks the blob's digest as it reads it.
//
// The chunks are read through a consumer that the cluster may place on any replica, and one that
// is still applying the chunks ends the read early (the digest then does not match). Such a read
// is taken up again, past the bytes already written to w, until the whole blob has been read and
// its digest matches, or until the engine's timeout: the chunks of one stored blob never change,
// so the bytes already written are the blob's first ones.
func (e *Engine) GetBlob(ctx context.Context, name string, w io.Writer) error {
	if name == "" {
		return fmt.Errorf("cluster: get blob: empty name: %w", replog.ErrNoBlob)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	var (
		written int64  // bytes of the blob already written to w
		nuid    string // the stored blob those bytes came from
		err     error
	)
	for attempt, wait := 0, 10*time.Millisecond; ; attempt++ {
		var n int64
		n, nuid, err = e.readBlob(ctx, name, nuid, written, w)
		written += n
		if err == nil || !errors.Is(err, jetstream.ErrDigestMismatch) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: get blob %q: %w (after %d reads: %w)", name, err, attempt+1, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("cluster: get blob %q: %w", name, replog.ErrNoBlob)
	}
	if err != nil {
		return fmt.Errorf("cluster: get blob %q: %w", name, err)
	}
	return nil
}

// readBlob reads blob name once, skipping its first skip bytes and writing the rest to w, and
// returns how many bytes it wrote and the stored blob's id. If nuid is not empty, the name must
// still hold that stored blob.
func (e *Engine) readBlob(ctx context.Context, name, nuid string, skip int64, w io.Writer) (int64, string, error) {
	res, err := e.objects.Get(ctx, name)
	if err != nil {
		return 0, nuid, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return 0, nuid, err
	}
	if nuid != "" && info.NUID != nuid {
		return 0, nuid, fmt.Errorf("the blob was replaced while it was read")
	}
	if _, err := io.CopyN(io.Discard, res, skip); err != nil {
		if errors.Is(err, io.EOF) {
			err = jetstream.ErrDigestMismatch // shorter than the part already read: read again
		}
		return 0, info.NUID, err
	}
	n, err := io.Copy(w, res)
	return n, info.NUID, err
}

// DeleteBlob implements replog.Log. Deleting a blob that is not there is not an error.
func (e *Engine) DeleteBlob(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("cluster: delete blob: empty name")
	}
	err := e.objects.Delete(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("cluster: delete blob %q: %w", name, err)
	}
	return nil
}

func (e *Engine) leaseSubject(key string) (string, error) {
	enc, err := encodeKey(key)
	if err != nil {
		return "", err
	}
	return "$KV." + e.kvName + "." + enc, nil
}

const (
	kvOperation = "KV-Operation"
	kvBarrier   = "=sync" // no encoded key starts like this
)

// Get implements replog.Leases. Like Last, the answer is confirmed through the bucket's quorum, so
// a node never reads a lease older than one another node has written and been told is written.
func (e *Engine) Get(ctx context.Context, key string) (uint64, []byte, error) {
	subject, err := e.leaseSubject(key)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: lease get: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	rev, value, _, err := e.getLeaseMarker(ctx, subject)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: lease get %q: %w", key, err)
	}
	return rev, value, nil
}

// getLeaseMarker returns the lease's revision and value (0 and nil if none), and, for a deleted
// lease, the sequence of its delete marker.
func (e *Engine) getLeaseMarker(ctx context.Context, subject string) (rev uint64, value []byte, marker uint64, err error) {
	// The bucket keeps one message per subject: a barrier subject of its own for each read, so
	// that another read's barrier does not replace this one before it is read back (barriers
	// expire after barrierTTL).
	seq, hdr, data, err := e.confirmedLast(ctx, e.kvStrm, subject, "$KV."+e.kvName+"."+kvBarrier+"."+nuid.Next())
	if err != nil {
		return 0, nil, 0, err
	}
	if seq == 0 {
		return 0, nil, 0, nil
	}
	if op := hdr.Get(kvOperation); op != "" {
		return 0, nil, seq, nil // a delete (or purge) marker
	}
	return seq, data, 0, nil
}

// Put implements replog.Leases. The new revision is the sequence of the write in the bucket's
// stream; a creation over a deleted key expects its delete marker, so revisions never repeat.
func (e *Engine) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	subject, err := e.leaseSubject(key)
	if err != nil {
		return 0, fmt.Errorf("cluster: lease put: %w", err)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	expect := rev
	if rev == 0 {
		// The key must not exist; it may exist as a delete marker, which counts as absent.
		_, _, marker, err := e.getLeaseMarker(ctx, subject)
		if err != nil {
			return 0, fmt.Errorf("cluster: lease put %q: %w", key, err)
		}
		expect = marker
	}
	ack, err := e.publishExpecting(ctx, &nats.Msg{Subject: subject, Data: value}, expect)
	switch {
	case err == nil:
		return ack.Sequence, nil
	case isConflict(err):
		// As for Append: the refusal may come from a server that no longer leads while the new
		// leader stores the value. It stands unless the lease now holds this very value.
		if _, now, _, gerr := e.getLeaseMarker(ctx, subject); gerr != nil || bytes.Equal(now, value) {
			return 0, fmt.Errorf("cluster: lease put %q at revision %d: refused (%v), but the lease may hold this value now: outcome unknown", key, rev, err)
		}
		return 0, fmt.Errorf("cluster: lease put %q at revision %d: %w", key, rev, replog.ErrLeaseConflict)
	default:
		return 0, fmt.Errorf("cluster: lease put %q at revision %d: %w", key, rev, err)
	}
}

// Delete implements replog.Leases: a delete marker written if the key is at rev.
func (e *Engine) Delete(ctx context.Context, key string, rev uint64) error {
	subject, err := e.leaseSubject(key)
	if err != nil {
		return fmt.Errorf("cluster: lease delete: %w", err)
	}
	if rev == 0 {
		return fmt.Errorf("cluster: lease delete %q at revision 0: %w", key, replog.ErrLeaseConflict)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	m := &nats.Msg{Subject: subject, Header: nats.Header{}}
	m.Header.Set(kvOperation, "DEL")
	_, err = e.publishExpecting(ctx, m, rev)
	switch {
	case err == nil:
		return nil
	case isConflict(err):
		return fmt.Errorf("cluster: lease delete %q at revision %d: %w", key, rev, replog.ErrLeaseConflict)
	default:
		return fmt.Errorf("cluster: lease delete %q at revision %d: %w", key, rev, err)
	}
}
