package replogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sync"

	"github.com/durable-go/durable/replog"
)

// MemCluster is an in-memory replicating engine for tests of cluster mode: one log, one lease per
// shard and one beacon, shared by the nodes that Node makes. Each node's view can be cut off, or
// made to lose the outcome of its appends, to play the faults of a real network.
type MemCluster struct {
	mu     sync.Mutex
	shards int
	seq    uint64 // the log's sequence, shared by every key
	recs   map[string][]memRec
	blobs  map[string][]byte
	rev    uint64 // the leases' revision, shared by every shard
	leases map[int]memRec
	alarms map[string]memAlarm // by key; a removed entry keeps its revision
	bytes  int64               // appended so far
	count  int64

	listeners map[*memListener]struct{}
	calls     memCalls              // the nodes' request-reply (memcalls.go)
	held      map[int]chan struct{} // by shard: held (HoldShard) until the channel is closed
}

// HoldShard makes, while hold is true, every call to shard's lease and to the logs of its keys
// wait until the shard is released, or until the call's context ends (it then fails, its outcome
// unknown, having done nothing), as the calls to a stream electing a leader do.
func (c *MemCluster) HoldShard(shard int, hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, held := c.held[shard]
	switch {
	case hold && !held:
		if c.held == nil {
			c.held = map[int]chan struct{}{}
		}
		c.held[shard] = make(chan struct{})
	case !hold && held:
		close(ch)
		delete(c.held, shard)
	}
}

// wait waits while shard is held (HoldShard).
func (c *MemCluster) wait(ctx context.Context, shard int) error {
	for {
		c.mu.Lock()
		ch := c.held[shard]
		c.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("replogtest: shard %d is held: %w (%w)", shard, replog.ErrUnknown, ctx.Err())
		}
	}
}

// MemShards is a MemCluster's number of shards unless WithShards says otherwise.
const MemShards = 16

type memRec struct {
	seq uint64
	rec []byte
}

// NewMemCluster returns an empty engine of MemShards shards.
func NewMemCluster() *MemCluster {
	return &MemCluster{shards: MemShards, recs: map[string][]memRec{}, blobs: map[string][]byte{}, leases: map[int]memRec{},
		alarms: map[string]memAlarm{}, listeners: map[*memListener]struct{}{}}
}

// WithShards sets the number of shards, before any node uses the engine, and returns c.
func (c *MemCluster) WithShards(n int) *MemCluster {
	c.mu.Lock()
	c.shards = n
	c.mu.Unlock()
	return c
}

// ShardOf returns key's shard: an FNV-1a hash of the key, modulo the number of shards.
func (c *MemCluster) ShardOf(key string) int {
	c.mu.Lock()
	n := c.shards
	c.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Node returns a new view of the engine, for one runtime: use its Log and Leases in
// core.Replication.
func (c *MemCluster) Node() *MemNode { return &MemNode{c: c} }

// Records returns key's records, in order.
func (c *MemCluster) Records(key string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for _, r := range c.recs[key] {
		out = append(out, bytes.Clone(r.rec))
	}
	return out
}

// Tamper calls fn with key's i-th record (from 0) as stored, to change it in place: a damaged
// engine, for tests of what the runtime does with what it cannot trust.
func (c *MemCluster) Tamper(key string, i int, fn func(rec []byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.recs[key][i].rec)
}

// Appended returns the records appended so far and their bytes, over every key.
func (c *MemCluster) Appended() (records, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count, c.bytes
}

// Blobs returns the names of the blobs stored.
func (c *MemCluster) Blobs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.blobs {
		out = append(out, name)
	}
	return out
}

// ErrCut is the error of every call through a view that is cut off (see MemNode.CutLog).
var ErrCut = errors.New("replogtest: node cut off from the engine")

// MemNode is one runtime's view of a MemCluster.
type MemNode struct {
	c         *MemCluster
	mu        sync.Mutex
	logCut    bool
	leasesCut bool
	beaconCut bool
	loseAcks  int                                // appends that land but report replog.ErrUnknown
	dropNext  int                                // appends that do not land and report replog.ErrUnknown
	before    func(key string, rec []byte) error // called before each append; an error is returned instead
	callsCut  bool                               // requests to and from the node are not delivered
	lostReply int                                // replies of the node's that are lost on the way
}

// CutLog cuts the node off from the log (cut true) or joins it back: every log call fails, an append
// with replog.ErrUnknown.
func (n *MemNode) CutLog(cut bool) { n.mu.Lock(); n.logCut = cut; n.mu.Unlock() }

// CutLeases cuts the node off from the leases (cut true) or joins it back: every call fails.
func (n *MemNode) CutLeases(cut bool) { n.mu.Lock(); n.leasesCut = cut; n.mu.Unlock() }

// CutBeacon cuts the node off from the beacon (cut true) or joins it back: its beats are lost, and
// it hears none, as a node paused or behind a cut link.
func (n *MemNode) CutBeacon(cut bool) { n.mu.Lock(); n.beaconCut = cut; n.mu.Unlock() }

// LoseAcks makes the node's next k appends land in the log but report replog.ErrUnknown, as an append
// whose acknowledgement was lost does.
func (n *MemNode) LoseAcks(k int) { n.mu.Lock(); n.loseAcks = k; n.mu.Unlock() }

// DropAppends makes the node's next k appends not land, and report replog.ErrUnknown, as an append lost
// on its way does.
func (n *MemNode) DropAppends(k int) { n.mu.Lock(); n.dropNext = k; n.mu.Unlock() }

// BeforeAppend sets a function called before each of the node's appends (nil: none); its error, if
// any, is the append's, and nothing is appended.
func (n *MemNode) BeforeAppend(fn func(key string, rec []byte) error) {
	n.mu.Lock()
	n.before = fn
	n.mu.Unlock()
}

// Log is the node's view of the log.
func (n *MemNode) Log() replog.Log { return memLog{n} }

// Leases is the node's view of the leases.
func (n *MemNode) Leases() replog.Leases { return memLeases{n} }

// Beacon is the node's view of the beacon.
func (n *MemNode) Beacon() replog.Beacon { return memBeacon{n} }

type memLog struct{ n *MemNode }

func (l memLog) cut() error {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if l.n.logCut {
		return ErrCut
	}
	return nil
}

func (l memLog) Shards() int {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards
}

func (l memLog) ShardOf(key string) int { return l.n.c.ShardOf(key) }

func (l memLog) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	n := l.n
	if err := n.c.wait(ctx, n.c.ShardOf(key)); err != nil {
		return 0, err
	}
	n.mu.Lock()
	cut, before := n.logCut, n.before
	drop, lose := n.dropNext > 0, false
	if drop {
		n.dropNext--
	} else if n.loseAcks > 0 {
		n.loseAcks--
		lose = true
	}
	n.mu.Unlock()
	if cut || drop {
		return 0, fmt.Errorf("replogtest: append to %q: %w", key, replog.ErrUnknown)
	}
	if before != nil {
		if err := before(key, rec); err != nil {
			return 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", replog.ErrUnknown, err)
	}
	c := n.c
	c.mu.Lock()
	var last uint64
	if rs := c.recs[key]; len(rs) > 0 {
		last = rs[len(rs)-1].seq
	}
	if last != expect {
		c.mu.Unlock()
		return 0, fmt.Errorf("replogtest: key %q is at %d, not %d: %w", key, last, expect, replog.ErrConflict)
	}
	c.seq++
	seq := c.seq
	c.recs[key] = append(c.recs[key], memRec{seq, bytes.Clone(rec)})
	c.count++
	c.bytes += int64(len(rec))
	c.mu.Unlock()
	if lose {
		return 0, fmt.Errorf("replogtest: append to %q: acknowledgement lost: %w", key, replog.ErrUnknown)
	}
	return seq, nil
}

func (l memLog) Last(ctx context.Context, key string) (uint64, []byte, error) {
	if err := l.cut(); err != nil {
		return 0, nil, err
	}
	if err := l.n.c.wait(ctx, l.n.c.ShardOf(key)); err != nil {
		return 0, nil, err
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.recs[key]
	if len(rs) == 0 {
		return 0, nil, nil
	}
	return rs[len(rs)-1].seq, bytes.Clone(rs[len(rs)-1].rec), nil
}

func (l memLog) Read(ctx context.Context, key string, after uint64, fn func(uint64, []byte) error) error {
	if err := l.cut(); err != nil {
		return err
	}
	if err := l.n.c.wait(ctx, l.n.c.ShardOf(key)); err != nil {
		return err
	}
	c := l.n.c
	c.mu.Lock()
	rs := append([]memRec(nil), c.recs[key]...)
	c.mu.Unlock()
	for _, r := range rs {
		if r.seq <= after {
			continue
		}
		if err := fn(r.seq, bytes.Clone(r.rec)); err != nil {
			return err
		}
	}
	return nil
}

func (l memLog) Trim(_ context.Context, key string, before uint64) error {
	if err := l.cut(); err != nil {
		return err
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.recs[key]
	i := 0
	for i < len(rs) && rs[i].seq < before {
		i++
	}
	c.recs[key] = append([]memRec(nil), rs[i:]...)
	return nil
}

func (l memLog) PutBlob(_ context.Context, _, name string, r io.Reader) error {
	if err := l.cut(); err != nil {
		return err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blobs[name] = b
	return nil
}

func (l memLog) GetBlob(_ context.Context, _, name string, w io.Writer) error {
	if err := l.cut(); err != nil {
		return err
	}
	c := l.n.c
	c.mu.Lock()
	b, ok := c.blobs[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("replogtest: blob %q: %w", name, replog.ErrNoBlob)
	}
	_, err := w.Write(b)
	return err
}

func (l memLog) DeleteBlob(_ context.Context, _, name string) error {
	if err := l.cut(); err != nil {
		return err
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.blobs, name)
	return nil
}

type memLeases struct{ n *MemNode }

func (ls memLeases) cut() error {
	ls.n.mu.Lock()
	defer ls.n.mu.Unlock()
	if ls.n.leasesCut {
		return ErrCut
	}
	return nil
}

func (ls memLeases) Get(ctx context.Context, shard int) (uint64, []byte, error) {
	if err := ls.cut(); err != nil {
		return 0, nil, err
	}
	if err := ls.n.c.wait(ctx, shard); err != nil {
		return 0, nil, err
	}
	c := ls.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if shard < 0 || shard >= c.shards {
		return 0, nil, fmt.Errorf("replogtest: shard %d of %d", shard, c.shards)
	}
	v, ok := c.leases[shard]
	if !ok {
		return 0, nil, nil
	}
	return v.seq, bytes.Clone(v.rec), nil
}

func (ls memLeases) Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error) {
	if err := ls.cut(); err != nil {
		return 0, err
	}
	if err := ls.n.c.wait(ctx, shard); err != nil {
		return 0, err
	}
	c := ls.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if shard < 0 || shard >= c.shards {
		return 0, fmt.Errorf("replogtest: shard %d of %d", shard, c.shards)
	}
	if c.leases[shard].seq != rev {
		return 0, fmt.Errorf("replogtest: the lease of shard %d is at %d, not %d: %w", shard, c.leases[shard].seq, rev, replog.ErrLeaseConflict)
	}
	c.rev++
	c.leases[shard] = memRec{c.rev, bytes.Clone(value)}
	return c.rev, nil
}

func (ls memLeases) Delete(ctx context.Context, shard int, rev uint64) error {
	if err := ls.cut(); err != nil {
		return err
	}
	if err := ls.n.c.wait(ctx, shard); err != nil {
		return err
	}
	c := ls.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.leases[shard]
	if !ok || v.seq != rev {
		return fmt.Errorf("replogtest: the lease of shard %d: %w", shard, replog.ErrLeaseConflict)
	}
	delete(c.leases, shard)
	return nil
}

type memBeacon struct{ n *MemNode }

// memListener is one Listen's fn, called by Beat itself: a beat is heard before Beat returns, so
// that tests need not wait for it.
type memListener struct {
	n       *MemNode
	mu      sync.Mutex // one call of fn at a time; held by stop until calls have ended
	fn      func([]byte)
	stopped bool
}

func (b memBeacon) Beat(_ context.Context, msg []byte) error {
	if len(msg) > replog.MaxBeatBytes {
		return fmt.Errorf("replogtest: a beat of %d bytes: at most %d", len(msg), replog.MaxBeatBytes)
	}
	b.n.mu.Lock()
	cut := b.n.beaconCut
	b.n.mu.Unlock()
	if cut {
		return nil // lost on the way, as over a cut link
	}
	c := b.n.c
	c.mu.Lock()
	ls := make([]*memListener, 0, len(c.listeners))
	for l := range c.listeners {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.n.mu.Lock()
		deaf := l.n.beaconCut
		l.n.mu.Unlock()
		if deaf {
			continue
		}
		l.mu.Lock()
		if !l.stopped {
			l.fn(bytes.Clone(msg))
		}
		l.mu.Unlock()
	}
	return nil
}

func (b memBeacon) Listen(fn func(msg []byte)) (func(), error) {
	l := &memListener{n: b.n, fn: fn}
	c := b.n.c
	c.mu.Lock()
	c.listeners[l] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.listeners, l)
		c.mu.Unlock()
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
	}, nil
}
