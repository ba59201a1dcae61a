package replica

import (
	"slices"
	"time"

	"github.com/durable-go/durable/internal/rendezvous"
)

// Placement converges. A node that holds a shard whose rendezvous pick is another node (live,
// ready, settled, not draining, and weighing more than this node for the shard) hands the shard
// over to it, a few shards per LeaseTTL at most, so that a node that comes back gets its share
// back without stalling everyone at once:
//   - from the hand-over's start this node takes no new turn of the shard's objects: their calls
//     are refused naming the pick, as a drain refuses; its beats name the shard as handed to the
//     pick, so that the other nodes refuse in the pick's name and the pick waits for the shard
//     instead of refusing;
//   - turns under way finish and commit; the runtime closes the shard's objects as they fall idle;
//   - the last one closed hands the lease back (Delete), after Config.HandOff gave the pick what
//     the runtime keeps of the shard's objects beside their logs (WebSocket handles), and this
//     node beats at once: the pick, hearing that the lease was handed back, takes it at once (a
//     free lease needs no TTL wait);
//   - a hand-over whose objects do not fall idle within handOverGiveUp LeaseTTL is given up (the
//     shard is served here again) and not tried again for handOverBackoff LeaseTTL.
// The leases alone decide who may write: a hand-over that goes wrong (a beat lost, a pick that
// dies) costs time, never safety.

// handOver is a shard this node hands over.
type handOver struct {
	to       string    // the pick
	began    time.Time // by this node's clock
	released time.Time // when the lease was handed back; zero until then
}

const (
	// handOversPerTTL bounds the hand-overs a node begins per LeaseTTL.
	handOversPerTTL = 2
	// handOverGiveUp is how many LeaseTTL a hand-over may wait for its objects to fall idle.
	handOverGiveUp = 2
	// handOverBackoff is how many LeaseTTL a shard whose hand-over was given up stays put.
	handOverBackoff = 8
)

// Place returns the node among nodes that rendezvous hashing picks for shard: the one of highest
// weight; "" if nodes is empty.
func Place(shard int, nodes []string) string { return rendezvous.Place(shard, nodes) }

// belongsTo names the node that should hold shard, of this node and the eligible members: this
// node counts whenever it does not drain (a node that holds a shard gives it only to a node that
// outweighs it). n.mu is held.
func (n *Node) belongsTo(shard int, now time.Time) string {
	var names []string
	if !n.draining {
		names = append(names, n.cfg.Node)
	}
	for name, m := range n.members {
		if name != n.cfg.Node && n.eligible(m, now) {
			names = append(names, name)
		}
	}
	return Place(shard, names)
}

// rebalance, run by the placer, follows the hand-overs under way (completed, given up, or their
// objects still to close) and begins new ones, within the bound.
func (n *Node) rebalance() {
	now := n.cfg.Now()
	ttl := n.cfg.LeaseTTL
	n.mu.Lock()
	if n.draining {
		n.mu.Unlock()
		return
	}
	var close []int
	for shard, h := range n.handing {
		to := n.members[h.to]
		switch {
		case !h.released.IsZero():
			// Done once the pick names the shard, or after a LeaseTTL: then a call anywhere may take it.
			if _, taken := to.heldShard(shard); taken || now.Sub(h.released) >= ttl {
				delete(n.handing, shard)
			}
		case now.Sub(h.began) >= handOverGiveUp*ttl || to == nil || !n.eligible(to, now):
			delete(n.handing, shard)
			n.heldBack[shard] = now.Add(handOverBackoff * ttl)
			n.cfg.Logger.Info("a shard's hand-over is given up: it is served here again", "event", "shard_handover_given_up",
				"shard", shard, "to", h.to)
		default:
			close = append(close, shard)
		}
	}
	for shard, t := range n.heldBack {
		if !now.Before(t) {
			delete(n.heldBack, shard)
		}
	}
	n.begun = slices.DeleteFunc(n.begun, func(t time.Time) bool { return now.Sub(t) >= ttl })
	var shards []int
	for shard := range n.held {
		shards = append(shards, shard)
	}
	slices.Sort(shards)
	var begin []int
	var free []*lease
	for _, shard := range shards {
		if len(n.begun) >= handOversPerTTL {
			break
		}
		if _, ok := n.handing[shard]; ok || n.heldBack[shard].After(now) {
			continue
		}
		to := n.belongsTo(shard, now)
		if to == "" || to == n.cfg.Node {
			continue
		}
		if !n.validAt(n.held[shard], now) {
			// Its lease cannot be proven now (its stream elects a leader, say): a hand-over needs
			// the stream, and would refuse the shard's calls here meanwhile, sent to a node that
			// cannot take the shard either.
			continue
		}
		n.handing[shard] = &handOver{to: to, began: now}
		n.begun = append(n.begun, now)
		begin = append(begin, shard)
		if l := n.held[shard]; l.refs <= 0 { // nothing resident: hand it back now
			delete(n.held, shard)
			free = append(free, l)
		} else {
			close = append(close, shard)
		}
		n.cfg.Logger.Info("a shard is handed over to the node it belongs to", "event", "shard_handover", "shard", shard, "to", to)
	}
	n.mu.Unlock()
	if len(begin) > 0 {
		n.beat(false) // the others refuse in the pick's name from now on, and the pick waits for it
	}
	for _, l := range free {
		if err := n.handBack(l); err != nil {
			n.cfg.Logger.Warn("a lease could not be handed back; it lapses after LeaseTTL", "event", "lease_release_failed", "shard", l.shard, "error", err)
		}
	}
	if n.cfg.Evict != nil {
		for _, shard := range close {
			n.cfg.Evict(shard)
		}
	}
}

// handBack hands back the lease of a shard under hand-over whose last object closed, and beats, so
// that the pick takes it at once. The lease is out of n.held already.
func (n *Node) handBack(l *lease) error {
	n.mu.Lock()
	h := n.handing[l.shard]
	n.mu.Unlock()
	if h != nil && n.cfg.HandOff != nil {
		n.cfg.HandOff(l.shard, h.to)
	}
	err := n.release(l)
	n.mu.Lock()
	h = n.handing[l.shard]
	if h != nil && err == nil {
		h.released = n.cfg.Now()
	}
	n.mu.Unlock()
	if h != nil {
		n.beat(false)
	}
	return err
}

// HandedHere reports whether a live node hands shard over to this node and this node does not
// hold it yet: what that node hands off (Config.HandOff) is for this node to keep.
func (n *Node) HandedHere(shard int) bool {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	_, to := n.handedBy(shard, now)
	_, mine := n.held[shard]
	return to == n.cfg.Node && !mine
}

// handingTo names the node shard is handed to, if this node hands it over; "" otherwise.
func (n *Node) handingTo(shard int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.handing[shard]; h != nil {
		return h.to
	}
	return ""
}

// handingLocked lists the hand-overs for the beat. n.mu is held.
func (n *Node) handingLocked() map[int]string {
	if len(n.handing) == 0 {
		return nil
	}
	out := make(map[int]string, len(n.handing))
	for shard, h := range n.handing {
		out[shard] = h.to
	}
	return out
}

// heardHandOvers notes, from a beat of another node's, the shards it hands to this node and has
// handed back already: the placer takes them at once. n.mu is held.
func (n *Node) heardHandOvers(msg *beatMsg) {
	for shard, to := range msg.Handing {
		if to != n.cfg.Node {
			continue
		}
		if _, still := msg.Shards[shard]; still {
			continue
		}
		if _, mine := n.held[shard]; mine {
			continue
		}
		n.offered[shard] = msg.Node
		select {
		case n.wake <- struct{}{}:
		default:
		}
		close(n.handedIn)
		n.handedIn = make(chan struct{})
	}
}

// takeOffered takes the shards handed back to this node, at once. The placer runs it.
func (n *Node) takeOffered() {
	n.mu.Lock()
	var shards []int
	for shard := range n.offered {
		shards = append(shards, shard)
	}
	clear(n.offered)
	draining := n.draining
	n.mu.Unlock()
	if draining {
		return
	}
	slices.Sort(shards)
	for _, shard := range shards {
		n.takeOverAside(shard, "handed over")
	}
}

// handedBy names the live node other than this one that hands shard over, and to whom; "" if none.
// n.mu is held.
func (n *Node) handedBy(shard int, now time.Time) (from, to string) {
	for name, m := range n.members {
		if name == n.cfg.Node || !n.alive(m, now) {
			continue
		}
		if t, ok := m.handing[shard]; ok {
			return name, t
		}
	}
	return "", ""
}

// awaitHandOver waits, for LeaseTTL at most, while a live node hands shard to this node and has not
// handed its lease back yet: a call sent here by that node's refusal is served once the lease is
// here, instead of being refused in that node's name.
func (n *Node) awaitHandOver(shard int) {
	timer := time.NewTimer(n.cfg.LeaseTTL)
	defer timer.Stop()
	for {
		now := n.cfg.Now()
		n.mu.Lock()
		from, to := n.handedBy(shard, now)
		_, held := n.members[from].heldShard(shard)
		_, mine := n.held[shard]
		ch := n.handedIn
		n.mu.Unlock()
		if from == "" || to != n.cfg.Node || !held || mine {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-n.stop:
			return
		}
	}
}

// heldShard returns the revision of shard's lease that m's beats name, if they do; m may be nil.
func (m *member) heldShard(shard int) (uint64, bool) {
	if m == nil {
		return 0, false
	}
	rev, ok := m.shards[shard]
	return rev, ok
}
