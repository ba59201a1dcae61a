package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// replayTimeout bounds the reading of an object's log (its snapshot and records) at a takeover, and
// the writing of a snapshot. A replay that cannot finish in time lets the shard's lease go rather
// than hold a shard this node cannot serve.
const replayTimeout = 3 * opTimeout

// opCtx is the context of one call to the log or the leases.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// bgCtx is the context of a call to the log or the leases that nothing but the node waits for (a
// probe, a takeover, a catch-up, a listing of alarms): bounded by d, and ended by Close, so that a
// node whose shard's stream has no leader stops at once instead of waiting that call out. A commit's
// append, and a lease handed back, keep opCtx: Close hands leases back after it ends these.
func (n *Node) bgCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(n.life, d)
}

// Config is a node's cluster mode, with the runtime's defaults applied.
type Config struct {
	Node          string // this node's name: the lease holder's
	Advertise     string // where this node's callers reach it, carried in its beats; may be ""
	Log           replog.Log
	Leases        replog.Leases
	Beacon        replog.Beacon
	LeaseTTL      time.Duration
	SnapshotEvery int
	Now           func() time.Time // the runtime's clock
	Logger        *slog.Logger
	// Evict closes the resident objects of shard that are idle, for a hand-over (handover.go): the
	// last one closed hands the lease back. The placer calls it; nil closes none.
	Evict func(shard int)
	// HandOff is called as a hand-over (handover.go) is about to hand shard's lease back to the
	// pick, the node named to, before it does: the runtime gives the pick what it keeps of the
	// shard's objects beside their logs (the handles of WebSockets other nodes hold), so that the
	// pick has it before it may run a turn of them. Nil gives nothing.
	HandOff func(shard int, to string)
	// LocalFile returns the path of the local file of the object ns/name on this node, for a warm
	// catch-up (warm.go); "" if its namespace is not served here. Nil keeps no file warm.
	LocalFile func(ns, name string) string
	// Replaced is told that a warm catch-up replaced the local file at path (rebuilt it).
	Replaced func(path string)
}

// Node is the runtime's side of cluster mode: the shard leases this node holds, renewed by one
// goroutine that Start starts and Close stops; the other nodes' leases it has seen, for the
// takeover rule; and the members it hears beat, for refusals from memory and for placing a dead
// node's shards.
type Node struct {
	cfg    Config
	margin time.Duration // a lease is valid for LeaseTTL less margin after its renewal began
	inc    string        // this incarnation of the node: a restart is another
	shards int
	takes  []sync.Mutex // by shard: one take at a time
	start  time.Time

	mu         sync.Mutex
	held       map[int]*lease       // by shard: the leases this node holds
	seen       map[int]seenLease    // by shard: another node's lease, its revision and when first seen so
	members    map[string]*member   // by name: the nodes heard beating, this one too
	draining   bool                 // Drain was called: no shard is taken, the held ones go back
	engineOK   time.Time            // when a call to the leases last succeeded
	handing    map[int]*handOver    // by shard: the shards this node hands over (handover.go)
	begun      []time.Time          // when the hand-overs of the last LeaseTTL began
	heldBack   map[int]time.Time    // by shard: no hand-over before then (one was given up)
	offered    map[int]string       // by shard: handed to this node and handed back, by the node named
	takingOver map[int]bool         // by shard: a takeover under way in a goroutine of its own (members.go)
	handedIn   chan struct{}        // closed, and replaced, when a shard is handed to this node
	logs       map[string]*logState // by object key: the logs of the objects resident here, shared with their facets (facets.go)

	wake chan struct{} // wakes the placer: a shard was handed to this node

	alarms alarmBook // the held shards' alarm indexes (alarms.go)

	stop       chan struct{}   // closed to stop the renewer and the placer
	life       context.Context // ended by Close: the calls that only the Node's goroutines wait for (bgCtx)
	endLife    context.CancelFunc
	stopOnce   sync.Once
	done       sync.WaitGroup // the renewer, the placer and the renewals and takeovers they started
	stopListen func()

	commits, records, recordBytes, pageBytes, snapshots atomic.Int64
}

// Start starts a node's cluster mode: its renewer, its placer, its warmer and its beacon listener
// run until Close.
func Start(cfg Config) (*Node, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	n := &Node{cfg: cfg, margin: cfg.LeaseTTL / 8, inc: hex.EncodeToString(rnd[:]), shards: cfg.Log.Shards(),
		start: cfg.Now(), held: map[int]*lease{}, seen: map[int]seenLease{}, members: map[string]*member{},
		handing: map[int]*handOver{}, heldBack: map[int]time.Time{}, offered: map[int]string{}, takingOver: map[int]bool{}, handedIn: make(chan struct{}),
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	n.takes = make([]sync.Mutex, n.shards)
	n.life, n.endLife = context.WithCancel(context.Background())
	n.alarms.init()
	stop, err := cfg.Beacon.Listen(n.heard)
	if err != nil {
		return nil, fmt.Errorf("core: cluster mode: listen to the beacon: %w", err)
	}
	n.stopListen = stop
	n.done.Go(n.renewer)
	n.done.Go(n.placer)
	n.done.Go(n.warmer)
	return n, nil
}

// Name is this node's name.
func (n *Node) Name() string { return n.cfg.Node }

// ShardOf returns the shard of the object ns/name.
func (n *Node) ShardOf(ns, name string) int { return n.cfg.Log.ShardOf(ns + "/" + name) }

// Stats are a node's counters over its life, and its leases and members now.
type Stats struct {
	Commits, Records, RecordBytes, PageBytes, Snapshots int64
	HeldLeases, WatchedLeases, Members                  int64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	now := n.cfg.Now()
	n.mu.Lock()
	held, watched := int64(len(n.held)), int64(len(n.seen))
	var live int64
	for _, m := range n.members {
		if n.alive(m, now) {
			live++
		}
	}
	n.mu.Unlock()
	return Stats{Commits: n.commits.Load(), Records: n.records.Load(), RecordBytes: n.recordBytes.Load(),
		PageBytes: n.pageBytes.Load(), Snapshots: n.snapshots.Load(), HeldLeases: held, WatchedLeases: watched, Members: live}
}

func (n *Node) shipped(c *walship.Commit, recs [][]byte) {
	n.commits.Add(1)
	n.records.Add(int64(len(recs)))
	n.pageBytes.Add(int64(c.Bytes()))
	for _, r := range recs {
		n.recordBytes.Add(int64(len(r)))
	}
}

// forgetSeenAfter is how long another node's lease is remembered after this node last saw it. A
// node asked for many shards that others own would otherwise remember them all; one forgotten and
// asked for again is timed afresh, so its takeover takes LeaseTTL from then.
func (n *Node) forgetSeenAfter() time.Duration { return 2 * n.cfg.LeaseTTL }

// renewer renews the held leases every quarter LeaseTTL, each on its own (a renewal stuck on a
// shard whose engine has no leader delays no other), hands back the kept leases whose keeping
// ended unused, and then beats: the beat names the leases as renewed, so that the other nodes time a
// dead node's leases from their last renewal. Close stops it and waits for it.
func (n *Node) renewer() {
	t := time.NewTicker(n.cfg.LeaseTTL / 4)
	defer t.Stop()
	for {
		n.round()
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

// round is one of the renewer's rounds.
func (n *Node) round() {
	now := n.cfg.Now()
	n.mu.Lock()
	var ls, drop []*lease
	for shard, l := range n.held {
		if l.refs <= 0 && (n.draining || !l.keepTill.IsZero() && !now.Before(l.keepTill) && !n.pinned(shard)) {
			delete(n.held, shard)
			drop = append(drop, l)
			continue
		}
		ls = append(ls, l)
	}
	for shard, s := range n.seen {
		if now.Sub(s.checked) > n.forgetSeenAfter() {
			delete(n.seen, shard)
		}
	}
	probe := len(ls) == 0
	n.mu.Unlock()
	for _, l := range drop {
		n.done.Go(func() {
			if err := n.handBack(l); err != nil { // a plain release unless the shard is handed over (Drain)
				n.cfg.Logger.Warn("a lease could not be handed back; it lapses after LeaseTTL", "event", "lease_release_failed", "shard", l.shard, "error", err)
			}
		})
	}
	var round sync.WaitGroup
	for _, l := range ls {
		if !l.renewing.TryLock() {
			continue // the last round's renewal is still under way
		}
		l.renewing.Unlock()
		round.Add(1)
		n.done.Go(func() {
			defer round.Done()
			n.renewLogged(l)
		})
	}
	if probe { // holding nothing, the node still learns whether its engine answers
		round.Add(1)
		n.done.Go(func() {
			defer round.Done()
			ctx, cancel := n.bgCtx(opTimeout)
			defer cancel()
			if _, _, err := n.cfg.Leases.Get(ctx, 0); err == nil {
				n.engineAnswered()
			}
		})
	}
	// The beat waits for the round's renewals, but not for long: a stuck one must not keep the
	// others' from being announced.
	finished := make(chan struct{})
	go func() { round.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(n.cfg.LeaseTTL / 8):
	case <-n.stop:
	}
	n.beat(false)
}

// renewLogged renews l, logging once per change whether renewing fails.
func (n *Node) renewLogged(l *lease) {
	err := n.renew(l)
	if err == nil {
		n.engineAnswered()
	}
	failing := err != nil && !errors.Is(err, ErrFenced)
	if !l.failingNow(failing) { // said once per change: a lost quorum fails every round
		return
	}
	if failing {
		n.cfg.Logger.Warn("a lease could not be renewed; it is tried again every quarter LeaseTTL", "event", "lease_renew_failed", "shard", l.shard, "error", err)
	} else if err == nil {
		n.cfg.Logger.Info("a lease is renewed again", "event", "lease_renewed", "shard", l.shard)
	}
}

func (n *Node) engineAnswered() {
	now := n.cfg.Now()
	n.mu.Lock()
	n.engineOK = now
	n.mu.Unlock()
}

// Close stops the renewer, the placer, the warmer (after its catch-up under way) and the listener,
// and hands back the leases still held
// (of objects that could not be closed).
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	n.endLife()
	n.done.Wait()
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
	n.beat(true)
	n.stopListen()
	return errors.Join(errs...)
}
