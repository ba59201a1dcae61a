package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-go/durable/replog"
)

// Config configures an Engine.
type Config struct {
	// Replicas is how many nodes keep each stream (default 3). An append is acknowledged once a
	// majority of them have it on disk. Use 1 for a 1-node cluster.
	Replicas int

	// Shards is how many streams the log is spread over (default 16), each key going to one by a
	// hash of its name. A shard's stream keeps its keys' records, their blobs and the shard's
	// lease: one raft group. It must stay the same for the life of the data: a different number
	// would look for keys in the wrong streams.
	Shards int

	// Prefix names the engine's streams and subjects (default "durable"), so that several engines
	// can share one JetStream cluster. Letters, digits, '_' and '-' only.
	Prefix string

	// Timeout bounds each operation whose context has no deadline (default 10 s), and each attempt
	// of New at making one stream ready.
	Timeout time.Duration

	// AttemptTimeout bounds one attempt of an operation: one publish and the wait for its
	// acknowledgement (with 1 s more per MiB of the message), one read of a replica, one purge
	// (default 1.5 s). While a stream elects a
	// new leader nothing answers; an attempt that gets no answer is tried again if that is safe (a
	// read, a purge, a refusal that stored nothing), until the operation's context ends, and an
	// append whose acknowledgement did not come is replog.ErrUnknown at once. So a call comes back
	// within about AttemptTimeout of the stream having a leader again. It must be shorter than
	// the slowest acknowledged write it should wait for (fsync on a majority of replicas).
	AttemptTimeout time.Duration

	// Logger, if set, receives what New waits for while JetStream is not ready; nil keeps it quiet.
	Logger *slog.Logger
}

// DefaultAttemptTimeout is Config.AttemptTimeout's default.
const DefaultAttemptTimeout = 1500 * time.Millisecond

// MaxRecord is the largest record Append accepts: a node's maximum payload (MaxPayload) less room
// for the subject and headers.
const MaxRecord = MaxPayload - 64<<10

// Engine keeps a replog.Log, replog.Leases and replog.Beacon in a JetStream cluster: one stream per
// shard, replicated Replicas times, that holds the shard's keys' records (one subject per key),
// their blobs and the shard's lease; and heartbeats over plain NATS subjects. It is safe for
// concurrent use. It does not own the connection it was given.
type Engine struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    Config
	apiPfx string
	calls  requests // the calls this node sends (requests.go)

	callSubjects  sync.Map // node name -> the subject it is served on (callSubject)
	callSubjectsN atomic.Int64
}

var (
	_ replog.Log    = (*Engine)(nil)
	_ replog.Leases = (*Engine)(nil)
	_ replog.Beacon = (*Engine)(nil)
)

// New makes the engine's streams ready over nc and returns the engine. Each is created if it is
// missing, updated if its settings are not the engine's and left alone otherwise, and has a leader
// that answers before New returns. On a cluster that has just started (no quorum yet) New keeps
// trying, each stream on its own and each attempt bounded by Config.Timeout, until all are ready
// or ctx ends, and logs to Config.Logger what it waits for (how many are ready, which are not, the
// last error). Nodes that start together may all call New at once.
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
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
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
	case cfg.AttemptTimeout < 0:
		return nil, fmt.Errorf("cluster: New: AttemptTimeout %v is negative", cfg.AttemptTimeout)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: New: %w", err)
	}
	e := &Engine{nc: nc, js: js, cfg: cfg, apiPfx: "$JS.API"}
	if err := e.setUp(ctx); err != nil {
		return nil, fmt.Errorf("cluster: New: %w", err)
	}
	return e, nil
}

// Shards implements replog.Log: Config.Shards.
func (e *Engine) Shards() int { return e.cfg.Shards }

// ShardOf implements replog.Log: an FNV-1a hash of the key, modulo Config.Shards.
func (e *Engine) ShardOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(e.cfg.Shards))
}

func (e *Engine) streamName(shard int) string { return e.cfg.Prefix + "_log_" + strconv.Itoa(shard) }

// The subjects of shard n's stream, under subjectBase(n): "k.<encoded key>" for a key's records,
// "lease" for the shard's lease, "b.<encoded name>.m" and "b.<encoded name>.c.<blob id>" for a
// blob's manifest and chunks, and "=sync" (and "=probe") for read barriers. Encoded keys and names
// are single tokens, so none of these can be another's.
func (e *Engine) subjectBase(shard int) string {
	return e.cfg.Prefix + ".log." + strconv.Itoa(shard) + "."
}

// barrier is the subject of a shard's read barriers. Encoded keys never contain '=' followed by a
// non-hex character: "=sync" names no key.
func (e *Engine) barrier(shard int) string { return e.subjectBase(shard) + "=sync" }

// where returns the stream and subject of key's records, and the stream's barrier subject.
func (e *Engine) where(key string) (stream, subject, barrier string, err error) {
	enc, err := encodeKey(key)
	if err != nil {
		return "", "", "", err
	}
	shard := e.ShardOf(key)
	return e.streamName(shard), e.subjectBase(shard) + "k." + enc, e.barrier(shard), nil
}

// maxKey bounds a key: the runtime's keys are a namespace (at most 64 bytes), '/' and an object
// name, at most replog.MaxKeyLen in all.
const maxKey = replog.MaxKeyLen

// encodeKey maps any non-empty key to a subject token, one to one: letters, digits, '_' and '-'
// stay, every other byte becomes '=' and two hex digits.
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

// bound gives ctx the engine's Timeout if it has no deadline.
func (e *Engine) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.cfg.Timeout)
}

// sleep waits for d or until ctx ends, and says which.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// publish publishes m, each attempt bounded by AttemptTimeout, and sends it again after a refusal
// that stored nothing, until ctx ends:
//
//   - no responders: the stream has no leader (an election is under way; only a leader listens
//     on the stream's subjects), so no server took the message;
//   - with an expected last sequence, the "wrong last sequence" without a number: a replicated
//     stream refuses such a publish without looking at the sequence while an earlier publish to
//     the subject is still in flight at its leader, even one that has been acknowledged already.
//     The refusing leader does not store it, and of two sends that expect the same sequence at
//     most one can be stored.
//
// Any other error, a timeout above all, is returned as it is: the message may have been stored.
func (e *Engine) publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	opts = append(opts, jetstream.WithRetryAttempts(0))
	wait := 500 * time.Microsecond
	for {
		actx, cancel := context.WithTimeout(ctx, e.publishTimeout(len(m.Data)))
		ack, err := e.js.PublishMsg(actx, m, opts...)
		cancel()
		if !storedNothing(err) {
			return ack, err
		}
		if sleep(ctx, wait) != nil {
			return nil, err
		}
		limit := 20 * time.Millisecond
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			limit = 100 * time.Millisecond // an election takes seconds: do not flood it
		}
		wait = min(2*wait, limit)
	}
}

// publishTimeout bounds one attempt at publishing n bytes: AttemptTimeout, and 1 s more per MiB
// (a record may be of several MiB, sent to and synced on a majority of the replicas).
func (e *Engine) publishTimeout(n int) time.Duration {
	return e.cfg.AttemptTimeout + time.Duration(n)*time.Second/(1<<20)
}

// storedNothing reports whether err is a refusal of a publish that stored nothing (see publish).
func storedNothing(err error) bool {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// isConflict reports whether err is JetStream's refusal of an expected last sequence.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// retry calls attempt, each call bounded by AttemptTimeout, until it succeeds, fails with an error
// that permanent says is final, or ctx ends. Only what is safe to repeat goes through it.
func (e *Engine) retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	wait := time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, e.cfg.AttemptTimeout)
		err := attempt(actx)
		cancel()
		var perm permanent
		if err == nil || errors.As(err, &perm) {
			return err
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (%w)", err, serr)
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// permanent marks an error that trying again would not change.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }
