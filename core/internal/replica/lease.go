package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durable-go/durable/replog"
)

// A node owns whole shards: it serves an object only while it holds the lease of the object's
// shard, which it takes when a call first needs it (or when it takes over a dead node's shards),
// renews every quarter LeaseTTL, and hands back once no object of the shard is resident here.
// Every lease is checked by the node's own clock: valid for LeaseTTL less a margin after its
// renewal began, and taken from another node only once this node has seen it unrenewed for
// LeaseTTL by its own clock.

// leaseValue is what a shard's lease holds.
type leaseValue struct {
	Node string `json:"node"`
	// Inc is the holder's incarnation: a restart is another.
	Inc string `json:"inc,omitempty"`
}

// lease is the lease of one shard this node holds.
type lease struct {
	shard    int
	renewing sync.Mutex // one renewal at a time
	mu       sync.Mutex // guards the fields below
	rev      uint64
	value    []byte
	renewed  time.Time // when the last successful Put began, by the node's clock
	lost     bool      // a Put found the revision moved: another node took the shard
	released bool      // handed back (Delete), or given up
	failing  bool      // the renewer's last renewal failed (and was logged)

	// Guarded by the Node's mu:
	refs     int       // resident objects of the shard that hold the lease
	keepTill time.Time // a lease taken over from a dead node is kept, unused, until then
}

// seenLease is another node's lease of a shard, as this node last saw it.
type seenLease struct {
	rev     uint64
	holder  string
	at      time.Time // when this node first saw the lease at this revision
	checked time.Time // when this node last saw it
	inc     string    // the holder's incarnation, when read from the lease by alarms.go; "" if not
}

// failingNow records whether the renewer's renewal of l failed, and reports whether that changed.
func (l *lease) failingNow(failing bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.failing != failing
	l.failing = failing
	return changed
}

// valid reports whether the lease is provably held now: renewed within LeaseTTL less the margin.
func (n *Node) valid(l *lease) bool { return n.validAt(l, n.cfg.Now()) }

// validAt reports whether the lease, unless renewed again, is provably held at t.
func (n *Node) validAt(l *lease, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && !l.released && t.Sub(l.renewed) < n.cfg.LeaseTTL-n.margin
}

// renew extends the lease. ErrFenced: another node took it over.
func (n *Node) renew(l *lease) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	if l.lost {
		l.mu.Unlock()
		return fmt.Errorf("%w: the lease of shard %d was taken over", ErrFenced, l.shard)
	}
	if l.released {
		l.mu.Unlock()
		return nil
	}
	rev, value := l.rev, l.value
	l.mu.Unlock()
	start := n.cfg.Now()
	ctx, cancel := context.WithTimeout(context.Background(), n.renewTimeout())
	defer cancel()
	nrev, err := n.cfg.Leases.Put(ctx, l.shard, value, rev)
	if err != nil {
		// A renewal whose acknowledgement was lost moved the lease to a revision this node was not
		// told: if the lease holds this node's value at another revision, it is still this node's,
		// renewed from there.
		if grev, gval, gerr := n.cfg.Leases.Get(ctx, l.shard); gerr == nil && grev != 0 && grev != rev && bytes.Equal(gval, value) {
			start = n.cfg.Now()
			nrev, err = n.cfg.Leases.Put(ctx, l.shard, value, grev)
		}
	}
	if took := n.cfg.Now().Sub(start); err == nil && took > n.cfg.LeaseTTL/2 {
		n.cfg.Logger.Debug("a lease was renewed slowly", "event", "lease_renew_slow", "shard", l.shard, "took", took)
	}
	l.mu.Lock()
	switch {
	case err == nil:
		l.rev, l.renewed = nrev, start
		l.mu.Unlock()
		return nil
	case errors.Is(err, replog.ErrLeaseConflict):
		l.lost = true
		l.mu.Unlock()
		// Not under l.mu: forget takes n.mu, and Table takes l.mu under n.mu.
		n.forget(l)
		return fmt.Errorf("%w: the lease of shard %d was taken over", ErrFenced, l.shard)
	default:
		l.mu.Unlock()
		return fmt.Errorf("core: renew the lease of shard %d: %w", l.shard, err)
	}
}

// renewTimeout bounds one renewal: 2 LeaseTTL (opTimeout at most). A renewal that takes longer
// proves nothing (the lease is valid for LeaseTTL less the margin from the renewal's start), and
// one sent as its stream lost its leader may get no answer at all: it is given up, and the next
// one, sent afresh, reaches the new leader as soon as there is one, instead of the shard's turns
// waiting out opTimeout behind it. An outcome that stayed unknown costs nothing: the next renewal
// finds this node's value at the new revision and renews from there.
func (n *Node) renewTimeout() time.Duration { return min(opTimeout, 2*n.cfg.LeaseTTL) }

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
		return fmt.Errorf("%w: the lease of shard %d was renewed too slowly to be valid", ErrLeaseUnproven, l.shard)
	}
	return nil
}

// forget stops renewing l. Neither n.mu nor l.mu is held (Table takes l.mu under n.mu).
func (n *Node) forget(l *lease) {
	n.mu.Lock()
	if n.held[l.shard] == l {
		delete(n.held, l.shard)
	}
	n.mu.Unlock()
	n.shardGone(l)
}

// release hands the lease back (Delete), so that another node may take the shard at once. The
// lease is out of n.held already, or is taken out now.
func (n *Node) release(l *lease) error {
	n.forget(l)
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	if l.lost || (l.released && l.rev == 0) {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	rev := l.rev
	l.rev = 0 // handed back: a second release does nothing
	l.mu.Unlock()
	ctx, cancel := opCtx()
	defer cancel()
	if err := n.cfg.Leases.Delete(ctx, l.shard, rev); err != nil && !errors.Is(err, replog.ErrLeaseConflict) {
		return fmt.Errorf("core: hand back the lease of shard %d: %w", l.shard, err)
	}
	return nil
}

// acquire returns the lease of shard, held for one more resident object: this node's if it holds
// it (proven valid), or taken now (see take). key names the object, for the error.
func (n *Node) acquire(shard int, key string) (*lease, error) {
	n.mu.Lock()
	if n.draining {
		n.mu.Unlock()
		return nil, &NotOwner{Key: key, Holder: n.successor(shard), Until: n.cfg.Now()}
	}
	if h := n.handing[shard]; h != nil { // handed over (handover.go): no new object of it here
		n.mu.Unlock()
		return nil, &NotOwner{Key: key, Holder: h.to, Until: n.cfg.Now()}
	}
	l := n.held[shard]
	if l != nil {
		l.refs++
	}
	n.mu.Unlock()
	if l != nil {
		if err := n.check(l); err != nil {
			n.unref(l)
			return nil, err
		}
		return l, nil
	}
	// Refused from memory: another node that this node hears beat holds the shard; unless it hands
	// the shard to this node, which then waits for it.
	n.awaitHandOver(shard)
	if no := n.heldElsewhere(shard, key); no != nil {
		return nil, no
	}
	n.takes[shard].Lock() // one take of a shard at a time: the others find it held
	defer n.takes[shard].Unlock()
	n.mu.Lock()
	if l = n.held[shard]; l != nil {
		l.refs++
	}
	n.mu.Unlock()
	if l != nil {
		return l, nil // just taken for another object of the shard
	}
	l, err := n.take(shard, key, false)
	if err != nil {
		return nil, err
	}
	n.beat(false) // the others refuse calls for the shard from now on, and know whose it is
	return l, nil
}

// unref is told that a resident object no longer holds l: the last one hands it back, unless it
// is kept (a shard just taken over).
func (n *Node) unref(l *lease) error {
	n.mu.Lock()
	l.refs--
	now := n.cfg.Now()
	handing := n.handing[l.shard] != nil
	last := l.refs <= 0 && n.held[l.shard] == l && (handing || !now.Before(l.keepTill))
	if last && !handing && n.pinned(l.shard) { // the shard's pending alarms keep it here (alarms.go); a hand-over's next owner loads them
		last, l.keepTill = false, now
	}
	if last {
		delete(n.held, l.shard)
	}
	n.mu.Unlock()
	switch {
	case !last:
		return nil
	case handing: // the last object of a shard handed over: the pick takes it at once
		return n.handBack(l)
	}
	return n.release(l)
}

// take takes the lease of shard for this node: a free lease at once, another node's only once this
// node has seen it unrenewed (its revision unchanged) for LeaseTTL by its own clock. Otherwise it
// fails with a
// *NotOwner naming the holder. The lease is held for one resident object, or, when kept (a takeover
// of a dead node's shard), for none until the keeping ends. The caller holds n.takes[shard], and
// this node does not hold the shard.
func (n *Node) take(shard int, key string, keep bool) (*lease, error) {
	ctx, cancel := n.bgCtx(opTimeout)
	defer cancel()
	n.mu.Lock()
	prior, known := n.seen[shard]
	n.mu.Unlock()
	rev, val, err := n.cfg.Leases.Get(ctx, shard)
	if err != nil {
		return nil, fmt.Errorf("%w: read the lease of shard %d: %w", ErrLeaseUnproven, shard, err)
	}
	now := n.cfg.Now()
	if rev != 0 {
		var v leaseValue
		_ = json.Unmarshal(val, &v)
		// A lease of this node's name from before a restart is timed like any other: the process
		// that held it may be paused, not gone, and would serve reads until its lease ran out.
		var s seenLease
		if known && prior.rev == rev {
			// Unrenewed since this node first saw it, before the read: a read slower than the
			// memory of unheard leases (a stream electing a leader) must not start the wait afresh.
			s = n.sawSince(shard, prior, now)
		} else {
			s = n.saw(shard, rev, v.Node, now)
		}
		if now.Sub(s.at) < n.cfg.LeaseTTL {
			return nil, &NotOwner{Key: key, Holder: v.Node, Until: s.at.Add(n.cfg.LeaseTTL)}
		}
	}
	value, _ := json.Marshal(leaseValue{Node: n.cfg.Node, Inc: n.inc})
	nrev, err := n.cfg.Leases.Put(ctx, shard, value, rev)
	if errors.Is(err, replog.ErrLeaseConflict) { // another node was quicker
		holder := "another node"
		if grev, val, gerr := n.cfg.Leases.Get(ctx, shard); gerr == nil && val != nil {
			var v leaseValue
			if json.Unmarshal(val, &v) == nil && v.Node != "" {
				holder = v.Node
				n.saw(shard, grev, v.Node, n.cfg.Now())
			}
		}
		return nil, &NotOwner{Key: key, Holder: holder, Until: now.Add(n.cfg.LeaseTTL)}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: take the lease of shard %d: %w", ErrLeaseUnproven, shard, err)
	}
	l := &lease{shard: shard, rev: nrev, value: value, renewed: now}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.seen, shard)
	if keep {
		l.keepTill = now.Add(keepTakenOver * n.cfg.LeaseTTL)
	} else {
		l.refs = 1
	}
	n.held[shard] = l
	n.shardTaken(shard)
	return l, nil
}

// keepTakenOver is how many LeaseTTL a node keeps a shard it took over from a dead node with no
// object of it resident: long enough for the dead node's callers to come here.
const keepTakenOver = 8

// saw records that shard's lease was at rev, held by holder, at now, and returns what this node
// knows of it: when it first saw that revision.
// sawSince records that shard's lease is still at the revision prior first saw, checked now, and
// returns the sighting timed from prior's.
func (n *Node) sawSince(shard int, prior seenLease, now time.Time) seenLease {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cur, ok := n.seen[shard]; ok && cur.rev == prior.rev && cur.at.Before(prior.at) {
		prior = cur
	}
	prior.checked = now
	n.seen[shard] = prior
	return prior
}

func (n *Node) saw(shard int, rev uint64, holder string, now time.Time) seenLease {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.seen[shard]
	if !ok || s.rev != rev {
		s = seenLease{rev: rev, holder: holder, at: now}
	}
	s.checked = now
	n.seen[shard] = s
	return s
}
