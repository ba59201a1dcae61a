package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core/internal/walship"
	"github.com/durable-go/durable/replog"
)

// opTimeout bounds one call to the log or the leases. It does not derive from the runtime's base
// context: the commits and lease hand-offs of Shutdown's drain run after that is cancelled.
const opTimeout = 10 * time.Second

// opCtx is the context of one call to the log or the leases.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// Config is a node's cluster mode, with the runtime's defaults applied.
type Config struct {
	Node          string // this node's name: the lease holder's
	Log           replog.Log
	Leases        replog.Leases
	LeaseTTL      time.Duration
	SnapshotEvery int
	Now           func() time.Time // the runtime's clock
	Logger        *slog.Logger
}

// Node is the runtime's side of cluster mode: the leases this node holds, renewed by one goroutine
// that Start starts and Close stops, and the foreign leases it has seen, for the takeover rule.
type Node struct {
	cfg    Config
	margin time.Duration // a lease is valid for LeaseTTL less margin after its renewal began

	mu       sync.Mutex
	held     map[string]*lease    // by key: the leases of this node's resident objects
	seen     map[string]seenLease // by key: another node's lease, its revision and when first seen so
	stop     chan struct{}        // closed to stop the renewer
	stopOnce sync.Once
	done     chan struct{} // closed when the renewer has returned

	commits, records, recordBytes, pageBytes, snapshots atomic.Int64
}

// Start starts a node's cluster mode: its renewer runs until Close.
func Start(cfg Config) *Node {
	n := &Node{cfg: cfg, margin: cfg.LeaseTTL / 8, held: map[string]*lease{}, seen: map[string]seenLease{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go n.renewer()
	return n
}

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Stats are a node's counters over its life, and its leases now.
type Stats struct {
	Commits, Records, RecordBytes, PageBytes, Snapshots int64
	HeldLeases, WatchedLeases                           int64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	held, watched := int64(len(n.held)), int64(len(n.seen))
	n.mu.Unlock()
	return Stats{Commits: n.commits.Load(), Records: n.records.Load(), RecordBytes: n.recordBytes.Load(),
		PageBytes: n.pageBytes.Load(), Snapshots: n.snapshots.Load(), HeldLeases: held, WatchedLeases: watched}
}

func (n *Node) shipped(c *walship.Commit, recs [][]byte) {
	n.commits.Add(1)
	n.records.Add(int64(len(recs)))
	n.pageBytes.Add(int64(c.Bytes()))
	for _, r := range recs {
		n.recordBytes.Add(int64(len(r)))
	}
}

type seenLease struct {
	rev     uint64
	at      time.Time // when this node first read the lease at this revision
	checked time.Time // when this node last read it
}

// forgetSeenAfter is how long a foreign lease is remembered after this node last read it. A node
// asked for many objects that others own would otherwise remember them all; one forgotten and asked
// for again is timed afresh, so its takeover takes LeaseTTL from then.
func (n *Node) forgetSeenAfter() time.Duration { return 2 * n.cfg.LeaseTTL }

// leaseValue is what a lease holds.
type leaseValue struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch,omitempty"`
}

// lease is one lease this node holds.
type lease struct {
	key      string
	renewing sync.Mutex // one renewal at a time
	mu       sync.Mutex // guards the fields below
	rev      uint64
	value    []byte
	renewed  time.Time // when the last successful Put began, by the node's clock
	lost     bool      // a Put found the revision moved: another node took the object
	released bool      // handed back (Delete), or given up
	failing  bool      // the renewer's last renewal failed (and was logged)
}

// failingNow records whether the renewer's renewal of l failed, and reports whether that changed.
func (l *lease) failingNow(failing bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.failing != failing
	l.failing = failing
	return changed
}

// renewer renews the leases of resident objects every quarter LeaseTTL, and forgets the foreign
// leases not read for forgetSeenAfter. Close stops it and waits for it.
func (n *Node) renewer() {
	defer close(n.done)
	t := time.NewTicker(n.cfg.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		now := n.cfg.Now()
		n.mu.Lock()
		ls := make([]*lease, 0, len(n.held))
		for _, l := range n.held {
			ls = append(ls, l)
		}
		for key, s := range n.seen {
			if now.Sub(s.checked) > n.forgetSeenAfter() {
				delete(n.seen, key)
			}
		}
		n.mu.Unlock()
		n.renewAll(ls)
	}
}

// renewWorkers bounds the renewals under way at once. Each takes a round trip to the leases: one
// after the other, those of many resident objects would take longer than LeaseTTL.
const renewWorkers = 32

// renewAll renews ls, renewWorkers at a time, and returns once every renewal has returned.
func (n *Node) renewAll(ls []*lease) {
	work := make(chan *lease)
	var wg sync.WaitGroup
	for range min(len(ls), renewWorkers) {
		wg.Go(func() {
			for l := range work {
				err := n.renew(l)
				failing := err != nil && !errors.Is(err, ErrFenced)
				if !l.failingNow(failing) { // said once per change: a lost quorum fails every round
					continue
				}
				if failing {
					n.cfg.Logger.Warn("a lease could not be renewed; it is tried again every quarter LeaseTTL", "event", "lease_renew_failed", "key", l.key, "error", err)
				} else if err == nil {
					n.cfg.Logger.Info("a lease is renewed again", "event", "lease_renewed", "key", l.key)
				}
			}
		})
	}
	for _, l := range ls {
		work <- l
	}
	close(work)
	wg.Wait()
}

// Close stops the renewer and hands back the leases still held (objects that could not be closed).
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
	n.mu.Lock()
	ls := make([]*lease, 0, len(n.held))
	for _, l := range n.held {
		ls = append(ls, l)
	}
	n.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, n.release(l))
	}
	return errors.Join(errs...)
}

// valid reports whether the lease is provably held now: renewed within LeaseTTL less the margin.
func (n *Node) valid(l *lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && !l.released && n.cfg.Now().Sub(l.renewed) < n.cfg.LeaseTTL-n.margin
}

// renew extends the lease. ErrFenced: another node took it over.
func (n *Node) renew(l *lease) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	if l.lost {
		l.mu.Unlock()
		return fmt.Errorf("%w: the lease %q was taken over", ErrFenced, l.key)
	}
	if l.released {
		l.mu.Unlock()
		return nil
	}
	rev, value := l.rev, l.value
	l.mu.Unlock()
	start := n.cfg.Now()
	ctx, cancel := opCtx()
	defer cancel()
	nrev, err := n.cfg.Leases.Put(ctx, l.key, value, rev)
	if err != nil {
		// A renewal whose acknowledgement was lost moved the lease to a revision this node was not
		// told: if the lease holds this node's value at another revision, it is still this node's,
		// renewed from there.
		if grev, gval, gerr := n.cfg.Leases.Get(ctx, l.key); gerr == nil && grev != 0 && grev != rev && bytes.Equal(gval, value) {
			start = n.cfg.Now()
			nrev, err = n.cfg.Leases.Put(ctx, l.key, value, grev)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.rev, l.renewed = nrev, start
		return nil
	case errors.Is(err, replog.ErrLeaseConflict):
		l.lost = true
		n.forget(l)
		return fmt.Errorf("%w: the lease %q was taken over", ErrFenced, l.key)
	default:
		return fmt.Errorf("core: renew the lease %q: %w", l.key, err)
	}
}

// check proves the lease valid for a turn, renewing it now if its last renewal is too old.
func (n *Node) check(l *lease) error {
	if n.valid(l) {
		return nil
	}
	if err := n.renew(l); err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrLeaseUnproven, err)
	}
	if !n.valid(l) {
		return fmt.Errorf("%w: the lease %q was renewed too slowly to be valid", ErrLeaseUnproven, l.key)
	}
	return nil
}

// forget stops renewing l. n.mu is not held; l.mu may be.
func (n *Node) forget(l *lease) {
	n.mu.Lock()
	if n.held[l.key] == l {
		delete(n.held, l.key)
	}
	n.mu.Unlock()
}

// release hands the lease back (Delete), so that another node may take the object at once.
func (n *Node) release(l *lease) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	if l.lost || l.released {
		l.mu.Unlock()
		n.forget(l)
		return nil
	}
	l.released = true
	rev := l.rev
	l.mu.Unlock()
	n.forget(l)
	ctx, cancel := opCtx()
	defer cancel()
	if err := n.cfg.Leases.Delete(ctx, l.key, rev); err != nil && !errors.Is(err, replog.ErrLeaseConflict) {
		return fmt.Errorf("core: hand back the lease %q: %w", l.key, err)
	}
	return nil
}

// take takes the lease of key for this node: a free lease at once, another node's only once this
// node has seen it unrenewed (its revision unchanged) for LeaseTTL by its own clock. Otherwise it
// fails with a *NotOwner naming the holder.
func (n *Node) take(key string) (*lease, error) {
	ctx, cancel := opCtx()
	defer cancel()
	rev, val, err := n.cfg.Leases.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: read the lease %q: %w", ErrLeaseUnproven, key, err)
	}
	now := n.cfg.Now()
	if rev != 0 {
		var v leaseValue
		_ = json.Unmarshal(val, &v)
		n.mu.Lock()
		s, ok := n.seen[key]
		if !ok || s.rev != rev {
			s = seenLease{rev: rev, at: now}
		}
		s.checked = now
		n.seen[key] = s
		n.mu.Unlock()
		if now.Sub(s.at) < n.cfg.LeaseTTL {
			return nil, &NotOwner{Key: key, Holder: v.Node, Until: s.at.Add(n.cfg.LeaseTTL)}
		}
	}
	value, _ := json.Marshal(leaseValue{Node: n.cfg.Node})
	nrev, err := n.cfg.Leases.Put(ctx, key, value, rev)
	if errors.Is(err, replog.ErrLeaseConflict) { // another node was quicker
		holder := "another node"
		if _, val, gerr := n.cfg.Leases.Get(ctx, key); gerr == nil && val != nil {
			var v leaseValue
			if json.Unmarshal(val, &v) == nil && v.Node != "" {
				holder = v.Node
			}
		}
		return nil, &NotOwner{Key: key, Holder: holder, Until: now.Add(n.cfg.LeaseTTL)}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: take the lease %q: %w", ErrLeaseUnproven, key, err)
	}
	l := &lease{key: key, rev: nrev, value: value, renewed: now}
	n.mu.Lock()
	delete(n.seen, key)
	n.held[key] = l
	n.mu.Unlock()
	return l, nil
}

// setEpoch records the object's epoch in the lease's value, written at the next renewal.
func (l *lease) setEpoch(node string, epoch uint64) {
	value, _ := json.Marshal(leaseValue{Node: node, Epoch: epoch})
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
}
