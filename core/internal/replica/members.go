package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-go/durable/internal/rendezvous"
	"github.com/durable-go/durable/replog"
)

// Every node beats through the engine's beacon every quarter LeaseTTL, naming the shards it holds
// and their revisions, whether it is ready and whether it drains. From the beats each node keeps the
// cluster's table in memory: who is alive, who holds which shard. The table serves two ends, both
// of liveness, never of safety (the leases decide who may write):
//   - a call for a shard that a live node holds is refused at once, naming it, with no read of the
//     lease through the engine's quorum;
//   - the shards of a node that stopped beating are taken over, once their leases lapse, by the
//     survivors, each shard by the one that rendezvous hashing picks among the live, ready,
//     settled members that do not drain: a dead node's shards spread over all survivors.

// member is a node as its beats describe it.
type member struct {
	name     string
	addr     string // where callers reach it (Config.Advertise)
	inc      string
	first    time.Time // when this node first heard this incarnation
	last     time.Time // when this node last heard it
	ready    bool
	draining bool
	shards   map[int]uint64   // the leases it holds, by shard, and their revisions
	handing  map[int]string   // the shards it hands over, and to whom (handover.go)
	warm     map[int][]string // by shard: its recently active objects, to keep warm (warm.go)
}

// beatMsg is a beat.
type beatMsg struct {
	Node     string           `json:"node"`
	Inc      string           `json:"inc"`
	Addr     string           `json:"addr,omitempty"`
	Ready    bool             `json:"ready,omitempty"`
	Draining bool             `json:"draining,omitempty"`
	Gone     bool             `json:"gone,omitempty"` // the node closed: forget it
	Shards   map[int]uint64   `json:"shards,omitempty"`
	Handing  map[int]string   `json:"handing,omitempty"` // shard -> the node it is handed to
	Warm     map[int][]string `json:"warm,omitempty"`    // shard -> its resident objects, most recently active first (warm.go)
}

// deadAfter is how long a node is thought alive after its last beat: three beats missed.
func (n *Node) deadAfter() time.Duration { return 3 * n.cfg.LeaseTTL / 4 }

// settleFor is how long a node must have beaten before it is given a dead node's shards: a node
// that joins (or comes back) waits, so that a node flapping up and down draws no shards.
func (n *Node) settleFor() time.Duration { return 2 * n.cfg.LeaseTTL }

// beat sends this node's beat: the leases it holds and can prove valid until its next beat (a node
// that cannot renew must not keep the others refusing calls in its name), whether it is ready, whether it
// drains, and the recently active objects of those shards, for their next owner to keep warm
// (warm.go); gone says it closed.
func (n *Node) beat(gone bool) {
	now := n.cfg.Now()
	msg := beatMsg{Node: n.cfg.Node, Inc: n.inc, Addr: n.cfg.Advertise, Gone: gone, Shards: map[int]uint64{}}
	n.mu.Lock()
	msg.Draining = n.draining || gone
	var ls []*lease
	for _, l := range n.held {
		ls = append(ls, l)
	}
	msg.Ready = n.readyLocked(now) == nil && !gone
	msg.Handing = n.handingLocked()
	n.mu.Unlock()
	for _, l := range ls {
		if !gone && n.validAt(l, now.Add(n.cfg.LeaseTTL/4)) { // valid until the next beat at least
			l.mu.Lock()
			msg.Shards[l.shard] = l.rev
			l.mu.Unlock()
		}
	}
	if !gone {
		msg.Warm = n.warmList(msg.Shards)
	}
	b := encodeBeat(msg)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer cancel()
	if err := n.cfg.Beacon.Beat(ctx, b); err != nil {
		n.cfg.Logger.Debug("a beat could not be sent", "event", "beat_failed", "error", err)
	}
}

// encodeBeat encodes msg, without its warm list if the beat would be over replog.MaxBeatBytes with
// it: the leases must go out, the warm list is an optimisation (CL6), so a node holding hundreds of
// shards sends its beats without it.
func encodeBeat(msg beatMsg) []byte {
	b, _ := json.Marshal(msg)
	if len(b) > replog.MaxBeatBytes && msg.Warm != nil {
		msg.Warm = nil
		b, _ = json.Marshal(msg)
	}
	return b
}

// heard is the beacon's listener: it updates the table with a beat.
func (n *Node) heard(b []byte) {
	var msg beatMsg
	if json.Unmarshal(b, &msg) != nil || msg.Node == "" {
		return
	}
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if msg.Gone {
		if m := n.members[msg.Node]; m != nil && m.inc == msg.Inc {
			delete(n.members, msg.Node)
		}
		return
	}
	m := n.members[msg.Node]
	if m == nil || m.inc != msg.Inc {
		m = &member{name: msg.Node, inc: msg.Inc, first: now}
		n.members[msg.Node] = m
	}
	m.last, m.ready, m.draining, m.shards, m.addr, m.handing, m.warm = now, msg.Ready, msg.Draining, msg.Shards, msg.Addr, msg.Handing, msg.Warm
	if msg.Node == n.cfg.Node {
		return
	}
	n.heardHandOvers(&msg)
	// Another node's leases, timed from when this node first heard of each revision: after a
	// node's death, the takeover rule counts from its last renewal that was heard.
	for shard, rev := range msg.Shards {
		s, ok := n.seen[shard]
		if ok && rev < s.rev {
			// An older sighting than the one kept: a node's beats may cross on the way (a call's
			// take beats while the renewer's round does), and a former holder's last beats may
			// come after its successor's. A lease's revision only grows: going back to the older
			// one would time the lease afresh, and a takeover's read, finding the newer revision,
			// would wait a LeaseTTL more.
			continue
		}
		if !ok || s.rev != rev {
			s = seenLease{rev: rev, holder: msg.Node, at: now}
		}
		s.checked = now
		n.seen[shard] = s
	}
}

// alive reports whether m beat lately. n.mu is held.
func (n *Node) alive(m *member, now time.Time) bool {
	if m.name == n.cfg.Node {
		return true
	}
	return now.Sub(m.last) < n.deadAfter()
}

// eligible reports whether m may be given a dead node's shards. n.mu is held.
func (n *Node) eligible(m *member, now time.Time) bool {
	if m.name == n.cfg.Node {
		return !n.draining && n.readyLocked(now) == nil && now.Sub(n.start) >= n.settleFor()
	}
	return n.alive(m, now) && m.ready && !m.draining && now.Sub(m.first) >= n.settleFor()
}

// score is a member's rendezvous weight for a shard: the member with the highest weight is
// picked, so that removing a member moves only its shards, spread evenly over the others.
func score(node string, shard int) uint64 { return rendezvous.Score(node, shard) }

// pick returns the eligible member with the highest weight for shard, skipping skip; "" if none.
// n.mu is held.
func (n *Node) pick(shard int, skip string, now time.Time) string {
	best, bestScore := "", uint64(0)
	names := []string{n.cfg.Node}
	for name := range n.members {
		if name != n.cfg.Node {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if name == skip {
			continue
		}
		m := n.members[name]
		if name == n.cfg.Node {
			m = &member{name: name}
		}
		if m == nil || !n.eligible(m, now) {
			continue
		}
		if s := score(name, shard); best == "" || s > bestScore {
			best, bestScore = name, s
		}
	}
	return best
}

// successor names the node that a draining node's callers should go to for shard. n.mu is held.
func (n *Node) successor(shard int) string {
	return n.pick(shard, n.cfg.Node, n.cfg.Now())
}

// heldElsewhere returns the refusal of a call for shard if a live node that this node hears beat
// holds the shard, and nil otherwise: then only a read of the lease can tell.
func (n *Node) heldElsewhere(shard int, key string) *NotOwner {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	// A draining node hands its shards back: only the lease can tell.
	holder, rev := n.announcedHolder(shard, now, false)
	// A shard handed over (handover.go) is refused in the name of the node it goes to.
	if _, to := n.handedBy(shard, now); to != "" && to != n.cfg.Node {
		return &NotOwner{Key: key, Holder: to, Until: now}
	}
	if holder == "" {
		return nil
	}
	until := now.Add(n.cfg.LeaseTTL)
	if s, ok := n.seen[shard]; ok && s.rev == rev {
		until = s.at.Add(n.cfg.LeaseTTL)
	}
	return &NotOwner{Key: key, Holder: holder, Until: until}
}

// announcedHolder returns the live node other than this one whose beats name shard's lease at the
// highest revision, and that revision; "" if none (draining nodes count if withDraining). n.mu is
// held.
func (n *Node) announcedHolder(shard int, now time.Time, withDraining bool) (holder string, rev uint64) {
	for name, m := range n.members {
		if name == n.cfg.Node || !n.alive(m, now) || m.draining && !withDraining {
			continue
		}
		if r, ok := m.shards[shard]; ok && r > rev {
			holder, rev = name, r
		}
	}
	return holder, rev
}

// placer takes over, every eighth of LeaseTTL, the shards of nodes that stopped beating, each
// shard by the survivor that rendezvous hashing picks, once the shard's lease has lapsed; takes at
// once the shards handed to this node; and hands over the shards that belong to another node
// (handover.go).
func (n *Node) placer() {
	t := time.NewTicker(n.cfg.LeaseTTL / 8)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.wake:
		}
		n.takeOffered()
		for _, shard := range n.orphans() {
			n.takeOverAside(shard, "whose node stopped beating")
		}
		n.rebalance()
	}
}

// orphans lists the shards whose holder stopped beating and that this node should take over.
func (n *Node) orphans() []int {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.draining {
		return nil
	}
	var out []int
	for shard, s := range n.seen {
		if _, mine := n.held[shard]; mine {
			continue
		}
		// A holder that restarted under the same name is alive in another incarnation than the
		// lease's (alarms.go learns the lease's): the lease rule alone decides.
		m := n.members[s.holder]
		if m != nil && n.alive(m, now) && (s.inc == "" || s.inc == m.inc) || now.Sub(s.at) < n.cfg.LeaseTTL {
			continue
		}
		if n.pick(shard, "", now) == n.cfg.Node {
			out = append(out, shard)
		}
	}
	slices.Sort(out)
	return out
}

// takeOverAside runs takeOver in a goroutine of its own, owned by the Node, unless one for shard is
// under way: a takeover whose stream has no leader (it lost its raft leader with the dead node)
// waits for an election, and must not hold up the other shards' takeovers behind it.
func (n *Node) takeOverAside(shard int, why string) {
	n.mu.Lock()
	if n.takingOver[shard] {
		n.mu.Unlock()
		return
	}
	n.takingOver[shard] = true
	n.mu.Unlock()
	n.done.Go(func() {
		defer func() {
			n.mu.Lock()
			delete(n.takingOver, shard)
			n.mu.Unlock()
		}()
		n.takeOver(shard, why)
	})
}

// takeOver takes the lease of a dead node's shard, or of one handed to this node, and keeps it,
// with no object of it resident yet. why says which, for the log.
func (n *Node) takeOver(shard int, why string) {
	n.takes[shard].Lock()
	defer n.takes[shard].Unlock()
	n.mu.Lock()
	_, mine := n.held[shard]
	n.mu.Unlock()
	if mine {
		return
	}
	_, err := n.take(shard, fmt.Sprintf("shard %d", shard), true)
	var no *NotOwner
	switch {
	case err == nil:
		n.cfg.Logger.Info("took over a shard "+why, "event", "shard_taken_over", "shard", shard)
		n.beat(false)
	case errors.As(err, &no):
		// Renewed after all, or another survivor was quicker: the table says so at the next beat.
	default:
		n.cfg.Logger.Debug("a shard could not be taken over yet", "event", "shard_takeover_failed", "shard", shard, "error", err)
	}
}

// Drain makes the node hand its shards over: from now on it takes no shard and refuses every call
// that would take one, naming the node that should serve it, and its beats say it drains, so no
// dead node's shard is given to it. Each held lease goes back once its last resident object is
// gone (the runtime's Shutdown evicts them). A shard whose lease can be proven and that has a
// successor (a live, ready node that does not drain) goes back as a hand-over to it (handover.go):
// the beats name it, the others refuse in its name, the successor waits for the lease instead of
// refusing, and Config.HandOff gives it what the runtime keeps beside the shard's logs first.
func (n *Node) Drain() {
	now := n.cfg.Now()
	n.mu.Lock()
	n.draining = true
	for shard, l := range n.held {
		if _, ok := n.handing[shard]; ok || !n.validAt(l, now) {
			continue
		}
		if to := n.successor(shard); to != "" {
			n.handing[shard] = &handOver{to: to, began: now}
		}
	}
	n.mu.Unlock()
	n.beat(false)
}

// ErrNotReady is returned by Ready while the node cannot serve yet.
var ErrNotReady = errors.New("core: cluster mode: not ready")

// Ready returns nil once the node can serve: it has listened to the beacon for a beat's while
// (so its table holds the live nodes), its engine answered within LeaseTTL, and it does not drain.
func (n *Node) Ready() error {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.readyLocked(now)
}

func (n *Node) readyLocked(now time.Time) error {
	switch {
	case n.draining:
		return fmt.Errorf("%w: draining", ErrNotReady)
	case now.Sub(n.start) < n.cfg.LeaseTTL/2:
		return fmt.Errorf("%w: listening to the other nodes' beats", ErrNotReady)
	case n.engineOK.IsZero() || now.Sub(n.engineOK) > n.cfg.LeaseTTL:
		return fmt.Errorf("%w: the engine has not answered within %v", ErrNotReady, n.cfg.LeaseTTL)
	}
	return nil
}

// ShardOwner is one row of the table: a shard and the node holding it, as this node knows.
type ShardOwner struct {
	Shard int
	Node  string // "" if no live node is known to hold it
	Rev   uint64
}

// Table returns the shards held by live nodes, as this node's table has them, by shard.
func (n *Node) Table() []ShardOwner {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []ShardOwner
	for shard := range n.shards {
		if l := n.held[shard]; l != nil {
			l.mu.Lock()
			out = append(out, ShardOwner{Shard: shard, Node: n.cfg.Node, Rev: l.rev})
			l.mu.Unlock()
		} else if holder, rev := n.announcedHolder(shard, now, true); holder != "" {
			out = append(out, ShardOwner{Shard: shard, Node: holder, Rev: rev})
		}
	}
	return out
}
