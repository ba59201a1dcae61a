package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/core/internal/walship"
)

// replOpTimeout bounds one call to the log or the leases. It does not derive from the runtime's
// base context: the commits and lease hand-offs of Shutdown's drain run after that is cancelled.
const replOpTimeout = 10 * time.Second

// replCtx is the context of one call to the log or the leases.
func replCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), replOpTimeout)
}

// replicaNode is the runtime's side of cluster mode: the leases this node holds, renewed by one
// goroutine, and the foreign leases it has seen, for the takeover rule.
type replicaNode struct {
	cfg    Replication
	margin time.Duration // a lease is valid for LeaseTTL less margin after its renewal began

	mu       sync.Mutex
	held     map[string]*lease    // by key: the leases of this node's resident objects
	seen     map[string]seenLease // by key: another node's lease, its revision and when first seen so
	stop     chan struct{}        // closed to stop the renewer
	stopOnce sync.Once
	done     chan struct{} // closed when the renewer has returned

	commits, records, recordBytes, pageBytes, snapshots atomic.Int64
}

// ReplicationStats are counters of cluster mode over the runtime's life.
type ReplicationStats struct {
	Commits     int64 // commits shipped to the log
	Records     int64 // records they took (a commit over MaxRecordBytes takes several)
	RecordBytes int64 // their size, as appended
	PageBytes   int64 // the page images they carried, before compression
	Snapshots   int64 // snapshots written

	// HeldLeases is the number of leases this node holds now (its resident objects').
	HeldLeases int64
	// WatchedLeases is the number of other nodes' leases this node is timing for the takeover rule:
	// those it read in the last 2 LeaseTTL, for calls it refused.
	WatchedLeases int64
}

// ReplicationStats returns cluster mode's counters (zero without Options.Replication).
func (rt *Runtime) ReplicationStats() ReplicationStats {
	n := rt.repl
	if n == nil {
		return ReplicationStats{}
	}
	n.mu.Lock()
	held, watched := int64(len(n.held)), int64(len(n.seen))
	n.mu.Unlock()
	return ReplicationStats{Commits: n.commits.Load(), Records: n.records.Load(), RecordBytes: n.recordBytes.Load(),
		PageBytes: n.pageBytes.Load(), Snapshots: n.snapshots.Load(), HeldLeases: held, WatchedLeases: watched}
}

func (n *replicaNode) shipped(nrecs int, c *walship.Commit, recs [][]byte) {
	n.commits.Add(1)
	n.records.Add(int64(nrecs))
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
func (n *replicaNode) forgetSeenAfter() time.Duration { return 2 * n.cfg.LeaseTTL }

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
}

// validate checks the options of cluster mode at Open.
func (r *Replication) validate() error {
	if r == nil {
		return nil
	}
	switch {
	case r.Node == "":
		return errors.New("core: Options.Replication.Node is required")
	case r.Log == nil:
		return errors.New("core: Options.Replication.Log is nil")
	case r.Leases == nil:
		return errors.New("core: Options.Replication.Leases is nil")
	case r.LeaseTTL < 0 || r.SnapshotEvery < 0:
		return errors.New("core: Options.Replication.LeaseTTL and SnapshotEvery must not be negative")
	}
	return nil
}

// openReplication starts cluster mode, if configured.
func (rt *Runtime) openReplication() {
	r := rt.opts.Replication
	if r == nil {
		return
	}
	cfg := *r
	orDefault(&cfg.LeaseTTL, 4*time.Second)
	orDefault(&cfg.SnapshotEvery, 1000)
	rt.repl = &replicaNode{cfg: cfg, margin: cfg.LeaseTTL / 8, held: map[string]*lease{}, seen: map[string]seenLease{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go rt.repl.renewer(rt)
}

// renewer renews the leases of resident objects every quarter LeaseTTL, and forgets the foreign
// leases not read for forgetSeenAfter. It is owned by the runtime: Shutdown stops it and waits for
// it, once the objects are closed.
func (n *replicaNode) renewer(rt *Runtime) {
	defer close(n.done)
	t := time.NewTicker(n.cfg.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		now := rt.now()
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
		n.renewAll(rt, ls)
	}
}

// renewWorkers bounds the renewals under way at once. Each takes a round trip to the leases: one
// after the other, those of many resident objects would take longer than LeaseTTL.
const renewWorkers = 32

// renewAll renews ls, renewWorkers at a time, and returns once every renewal has returned.
func (n *replicaNode) renewAll(rt *Runtime, ls []*lease) {
	work := make(chan *lease)
	var wg sync.WaitGroup
	for range min(len(ls), renewWorkers) {
		wg.Go(func() {
			for l := range work {
				if err := n.renew(rt, l); err != nil && !errors.Is(err, ErrFenced) {
					rt.log.Warn("a lease could not be renewed", "event", "lease_renew_failed", "key", l.key, "error", err)
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

// close stops the renewer and hands back the leases still held (objects that could not be closed).
func (n *replicaNode) close(rt *Runtime) error {
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
func (n *replicaNode) valid(rt *Runtime, l *lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && !l.released && rt.now().Sub(l.renewed) < n.cfg.LeaseTTL-n.margin
}

// renew extends the lease. ErrFenced: another node took it over.
func (n *replicaNode) renew(rt *Runtime, l *lease) error {
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
	start := rt.now()
	ctx, cancel := replCtx()
	defer cancel()
	nrev, err := n.cfg.Leases.Put(ctx, l.key, value, rev)
	if err != nil {
		// A renewal whose acknowledgement was lost moved the lease to a revision this node was not
		// told: if the lease holds this node's value at another revision, it is still this node's,
		// renewed from there.
		if grev, gval, gerr := n.cfg.Leases.Get(ctx, l.key); gerr == nil && grev != 0 && grev != rev && bytes.Equal(gval, value) {
			start = rt.now()
			nrev, err = n.cfg.Leases.Put(ctx, l.key, value, grev)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.rev, l.renewed = nrev, start
		return nil
	case errors.Is(err, ErrLeaseConflict):
		l.lost = true
		n.forget(l)
		return fmt.Errorf("%w: the lease %q was taken over", ErrFenced, l.key)
	default:
		return fmt.Errorf("core: renew the lease %q: %w", l.key, err)
	}
}

// check proves the lease valid for a turn, renewing it now if its last renewal is too old.
func (n *replicaNode) check(rt *Runtime, l *lease) error {
	if n.valid(rt, l) {
		return nil
	}
	if err := n.renew(rt, l); err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrLeaseUnproven, err)
	}
	if !n.valid(rt, l) {
		return fmt.Errorf("%w: the lease %q was renewed too slowly to be valid", ErrLeaseUnproven, l.key)
	}
	return nil
}

// forget stops renewing l. n.mu is not held; l.mu may be.
func (n *replicaNode) forget(l *lease) {
	n.mu.Lock()
	if n.held[l.key] == l {
		delete(n.held, l.key)
	}
	n.mu.Unlock()
}

// release hands the lease back (Delete), so that another node may take the object at once.
func (n *replicaNode) release(l *lease) error {
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
	ctx, cancel := replCtx()
	defer cancel()
	if err := n.cfg.Leases.Delete(ctx, l.key, rev); err != nil && !errors.Is(err, ErrLeaseConflict) {
		return fmt.Errorf("core: hand back the lease %q: %w", l.key, err)
	}
	return nil
}

// take takes the lease of key for this node: a free lease at once, another node's only once this
// node has seen it unrenewed (its revision unchanged) for LeaseTTL by its own clock. Otherwise it
// fails with a *NotOwnerError naming the holder.
func (n *replicaNode) take(rt *Runtime, key string) (*lease, error) {
	ctx, cancel := replCtx()
	defer cancel()
	rev, val, err := n.cfg.Leases.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: read the lease %q: %v", ErrLeaseUnproven, key, err)
	}
	now := rt.now()
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
			return nil, &NotOwnerError{Key: key, Holder: v.Node, Until: s.at.Add(n.cfg.LeaseTTL)}
		}
	}
	value, _ := json.Marshal(leaseValue{Node: n.cfg.Node})
	nrev, err := n.cfg.Leases.Put(ctx, key, value, rev)
	if errors.Is(err, ErrLeaseConflict) { // another node was quicker
		holder := "another node"
		if _, val, gerr := n.cfg.Leases.Get(ctx, key); gerr == nil && val != nil {
			var v leaseValue
			if json.Unmarshal(val, &v) == nil && v.Node != "" {
				holder = v.Node
			}
		}
		return nil, &NotOwnerError{Key: key, Holder: holder, Until: now.Add(n.cfg.LeaseTTL)}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: take the lease %q: %v", ErrLeaseUnproven, key, err)
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
