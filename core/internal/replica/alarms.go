package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/replog"
)

// Each shard's alarm index (replog.Log's GetAlarm, SetAlarm, Alarms) says when each of its
// objects' earliest alarm is due, so that the node holding the shard runs them, whether or not
// anything calls the objects. Its rules, like the local index's:
//   - before a commit that sets or moves an object's earliest timer, the entry holds that time or
//     an earlier one (ensureAlarm): a spurious or early entry is allowed, a missing one is not;
//   - after the commit, the entry is made exact (raised, or removed when no timer is left) in the
//     background, only at the revision this node knows, so that a deposed owner, paused and then
//     resumed, can never undo a newer owner's entry: an entry this node only listed (another
//     node's write) is written again before this node relies on it;
//   - a node that takes a shard lists its entries and hands them to its scheduler (AlarmHooks) at
//     once, each shard on its own, a failed listing again soon (listShard), and lists them again
//     every 4 LeaseTTL while it holds the shard (an entry written by a
//     deposed owner just after the takeover's listing is found there);
//   - a shard with pending entries is not handed back when its last object is evicted, so that
//     some live node always holds it; when it goes (drained, or taken over), its entries leave the
//     scheduler (AlarmHooks.Gone);
//   - a shard no live node announces, with entries, is taken by the node that rendezvous hashing
//     picks: at once if its lease is free, after LeaseTTL unrenewed otherwise (a full restart).

// Alarm is one entry of a shard's alarm index: an object's key ("namespace/name") and the time its
// earliest alarm is due (Unix ns).
type Alarm struct {
	Key string
	At  int64
}

// AlarmHooks is how a node tells the runtime's scheduler of its shards' alarms.
type AlarmHooks struct {
	// Loaded is given the entries of a shard this node holds: the scheduler looks at each object
	// no later than its time. It may be given an entry more than once.
	Loaded func(shard int, entries []Alarm)
	// Gone says that this node no longer holds shard: its objects' alarms leave the scheduler.
	Gone func(shard int)
}

// alarmMark is what this node knows of an entry: its time (0: none) and revision, and whether
// this node wrote it at that revision while holding the shard.
type alarmMark struct {
	at   int64
	rev  uint64
	mine bool
}

// exactOp is the time an entry should have after a commit (0: none), and the revision of the
// entry it was computed from: it is written only if the entry is still there.
type exactOp struct {
	at  int64
	rev uint64
}

// alarmBook is the node's side of its shards' alarm indexes. Its mu comes after the Node's mu.
type alarmBook struct {
	mu      sync.Mutex
	hooks   *AlarmHooks                   // nil until ServeAlarms
	marks   map[int]map[string]*alarmMark // by held shard, by key
	loads   map[int]bool                  // shards to list
	listing map[int]bool                  // shards whose lister runs (listShard)
	exact   map[string]exactOp            // by key: what its entry should be after the last commit
	inFly   map[string]bool               // keys whose exact write is under way
	wake    chan struct{}                 // the alarm worker's: shards to list
	wakeEx  chan struct{}                 // the exact writer's: entries to make exact
	rounds  int                           // the sweeper's, for the periodic listing of held shards
}

// sweepEvery is how many LeaseTTL go between two sweeps, and relistEvery how many sweeps between two
// listings of a held shard: 4 LeaseTTL. A sweep costs, for each shard no live node announces and
// rendezvous hashing gives this node, one listing (a read through the shard's quorum), and a read
// of the lease if the shard has entries.
const (
	sweepEvery  = 2
	relistEvery = 2
)

// maxAlarmTries bounds the compare-and-set attempts of one entry before a commit.
const maxAlarmTries = 5

func (b *alarmBook) init() {
	b.marks, b.loads, b.listing = map[int]map[string]*alarmMark{}, map[int]bool{}, map[int]bool{}
	b.wake, b.wakeEx = make(chan struct{}, 1), make(chan struct{}, 1)
	b.exact, b.inFly = map[string]exactOp{}, map[string]bool{}
}

func (b *alarmBook) poke() { signal(b.wake) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ServeAlarms starts the node's alarm worker (which starts a lister for each shard to list), its
// exact writer and its sweeper, which tell hooks of the shards' alarms until Close. The runtime
// calls it once its scheduler runs.
func (n *Node) ServeAlarms(hooks AlarmHooks) {
	b := &n.alarms
	b.mu.Lock()
	b.hooks = &hooks
	b.mu.Unlock()
	n.done.Go(n.alarmWorker)
	n.done.Go(n.exactWriter)
	n.done.Go(n.alarmSweeper)
	b.poke() // the shards taken before
}

// shardTaken is told that this node holds shard now: its entries are listed. n.mu is held.
func (n *Node) shardTaken(shard int) {
	b := &n.alarms
	b.mu.Lock()
	if b.marks[shard] == nil {
		b.marks[shard] = map[string]*alarmMark{}
	}
	b.loads[shard] = true
	b.mu.Unlock()
	b.poke()
}

// shardGone is told that this node no longer holds l's shard (handed back, or taken over): the
// shard's entries leave the scheduler, unless the shard was taken again meanwhile.
func (n *Node) shardGone(l *lease) {
	n.mu.Lock()
	if h := n.held[l.shard]; h != nil && h != l {
		n.mu.Unlock()
		return
	}
	b := &n.alarms
	b.mu.Lock()
	delete(b.marks, l.shard)
	delete(b.loads, l.shard)
	hooks := b.hooks
	b.mu.Unlock()
	n.mu.Unlock()
	if hooks != nil {
		hooks.Gone(l.shard)
	}
}

// pinned reports whether shard has pending entries that this node knows of: then it keeps the
// shard's lease though no object of it is resident. n.mu is held.
func (n *Node) pinned(shard int) bool {
	b := &n.alarms
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.marks[shard] {
		if m.at != 0 {
			return true
		}
	}
	return false
}

// ensureAlarm makes key's entry hold at or an earlier time, durably, before the commit that sets
// the object's earliest timer to at. The write is this node's own (compare-and-set at the
// revision it reads), so that a deposed writer's background write at an older revision fails.
func (n *Node) ensureAlarm(key string, shard int, at int64) error {
	b := &n.alarms
	b.mu.Lock()
	var cur alarmMark
	known := false
	if m := b.marks[shard][key]; m != nil {
		// An exact write pending or under way may raise the entry past at: then write anyway.
		_, pending := b.exact[key]
		if m.mine && m.at != 0 && m.at <= at && !pending && !b.inFly[key] {
			b.mu.Unlock()
			return nil
		}
		cur, known = *m, true
	}
	b.mu.Unlock()
	ctx, cancel := opCtx()
	defer cancel()
	var err error
	for range maxAlarmTries {
		if !known {
			var t time.Time
			if t, cur.rev, err = n.cfg.Log.GetAlarm(ctx, key); err != nil {
				break
			}
			cur.at = unixNano(t)
		}
		want := at
		if cur.at != 0 && cur.at < at {
			want = cur.at // an earlier entry stays: it fires, finds nothing due, and is made exact
		}
		var rev uint64
		rev, err = n.cfg.Log.SetAlarm(ctx, key, time.Unix(0, want), cur.rev)
		if err == nil {
			b.mu.Lock()
			if ms := b.marks[shard]; ms != nil {
				ms[key] = &alarmMark{at: want, rev: rev, mine: true}
			}
			b.mu.Unlock()
			return nil
		}
		if !errors.Is(err, replog.ErrAlarmMoved) && !errors.Is(err, replog.ErrUnknown) {
			break
		}
		known = false // another write came first, or this one may be in: read the entry again
	}
	return fmt.Errorf("core: cluster mode: index the alarm of %s: %w", key, err)
}

// alarmCommitted is told, after a commit, the object's earliest timer (at; 0 if none): the entry
// is made exact in the background if it is not.
func (n *Node) alarmCommitted(key string, shard int, at int64) {
	b := &n.alarms
	b.mu.Lock()
	m := b.marks[shard][key]
	if m == nil || m.at == at {
		delete(b.exact, key) // an earlier commit's is stale
		b.mu.Unlock()
		return
	}
	b.exact[key] = exactOp{at: at, rev: m.rev}
	b.mu.Unlock()
	signal(b.wakeEx)
}

// alarmWorker starts, until Close, a lister (listShard) for each shard to list that has none
// running, each a goroutine of its own that the Node waits for: a listing slow or failing on one
// shard (its stream electing a leader) delays no other shard's.
func (n *Node) alarmWorker() {
	b := &n.alarms
	for {
		select {
		case <-n.stop:
			return
		case <-b.wake:
		}
		b.mu.Lock()
		for shard := range b.loads {
			if !b.listing[shard] {
				b.listing[shard] = true
				n.done.Go(func() { n.listShard(shard) })
			}
		}
		b.mu.Unlock()
	}
}

// listShard lists shard's entries into the scheduler as long as it is asked to (the shard taken, a
// periodic listing, a failed one), until the shard goes or Close. A listing that fails is tried
// again after listRetry LeaseTTL, doubling up to listRetryMax LeaseTTL: a shard's overdue alarms
// run soon after its log answers.
func (n *Node) listShard(shard int) {
	b := &n.alarms
	first := time.Duration(float64(n.cfg.LeaseTTL) * listRetry)
	wait := first
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		b.mu.Lock()
		if !b.loads[shard] {
			delete(b.listing, shard)
			b.mu.Unlock()
			return
		}
		delete(b.loads, shard)
		b.mu.Unlock()
		if n.loadAlarms(shard) {
			wait = first
			continue
		}
		retry.Reset(wait)
		wait = min(2*wait, time.Duration(float64(n.cfg.LeaseTTL)*listRetryMax))
		select {
		case <-n.stop:
			b.mu.Lock()
			delete(b.listing, shard)
			b.mu.Unlock()
			return
		case <-retry.C:
		}
	}
}

// exactWriter makes entries exact after commits, until Close; then it makes the entries left exact
// once more.
func (n *Node) exactWriter() {
	b := &n.alarms
	for {
		select {
		case <-n.stop:
			n.writeExact()
			return
		case <-b.wakeEx:
		}
		n.writeExact()
	}
}

// listRetry is how many LeaseTTL a failed listing waits before it is tried again (the first time;
// then twice as long each time, up to listRetryMax LeaseTTL).
const (
	listRetry    = 1.0 / 8
	listRetryMax = 1.0 / 2
)

// loadAlarms lists shard's entries and hands them to the scheduler, if this node still holds the
// shard. It reports false if the listing failed: the shard is listed again (alarmWorker).
func (n *Node) loadAlarms(shard int) bool {
	ctx, cancel := n.bgCtx(opTimeout)
	defer cancel()
	start := time.Now()
	var listed []Alarm
	revs := map[string]uint64{}
	err := n.cfg.Log.Alarms(ctx, shard, func(key string, at time.Time, rev uint64) error {
		listed = append(listed, Alarm{Key: key, At: unixNano(at)})
		revs[key] = rev
		return nil
	})
	b := &n.alarms
	if err != nil {
		n.cfg.Logger.Debug("a shard's alarm index could not be listed; it is tried again", "event", "alarm_index_list_failed",
			"shard", shard, "error", err)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.marks[shard] == nil {
			return true // the shard went meanwhile: nothing to list
		}
		b.loads[shard] = true
		return false
	}
	b.mu.Lock()
	ms := b.marks[shard]
	if ms == nil { // the shard went meanwhile
		b.mu.Unlock()
		return true
	}
	for _, a := range listed {
		if m := ms[a.Key]; m == nil || m.rev < revs[a.Key] {
			ms[a.Key] = &alarmMark{at: a.At, rev: revs[a.Key]}
		}
	}
	hooks := b.hooks
	b.mu.Unlock()
	n.cfg.Logger.Debug("a shard's alarm index is listed", "event", "alarm_index_listed", "shard", shard, "entries", len(listed),
		"took", time.Since(start))
	if hooks != nil && len(listed) > 0 {
		hooks.Loaded(shard, listed)
	}
	return true
}

// writeExact makes the entries of the last commits exact, each at the revision this node knows;
// an entry that moved meanwhile is left as the other write made it.
func (n *Node) writeExact() {
	b := &n.alarms
	b.mu.Lock()
	exact := b.exact
	b.exact = map[string]exactOp{}
	b.mu.Unlock()
	for key, op := range exact {
		shard := n.cfg.Log.ShardOf(key)
		at, rev := op.at, op.rev
		b.mu.Lock()
		m := b.marks[shard][key]
		if m == nil || m.at == at || m.rev != rev { // written since the commit: that write stands
			b.mu.Unlock()
			continue
		}
		b.inFly[key] = true
		b.mu.Unlock()
		ctx, cancel := opCtx()
		var t time.Time
		if at != 0 {
			t = time.Unix(0, at)
		}
		nrev, err := n.cfg.Log.SetAlarm(ctx, key, t, rev)
		cancel()
		b.mu.Lock()
		delete(b.inFly, key)
		if m := b.marks[shard][key]; m != nil && m.rev == rev {
			if err == nil {
				*m = alarmMark{at: at, rev: nrev, mine: true}
			} else {
				delete(b.marks[shard], key) // not known any more: the next commit reads it
			}
		}
		b.mu.Unlock()
		if err != nil && !errors.Is(err, replog.ErrAlarmMoved) {
			n.cfg.Logger.Debug("an alarm entry could not be made exact; it stays early", "event", "alarm_index_exact_failed",
				"key", key, "error", err)
		}
	}
}

// alarmSweeper, every 2 LeaseTTL, lists again the shards this node holds (every other round)
// and looks for shards that no live node announces and that have entries: those this node should
// hold (by rendezvous hashing) it takes, at once if their lease is free, or times their lease for
// the placer if a node that is gone holds it (a full restart leaves every lease so).
func (n *Node) alarmSweeper() {
	t := time.NewTicker(sweepEvery * n.cfg.LeaseTTL)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.sweepAlarms()
	}
}

func (n *Node) sweepAlarms() {
	now := n.cfg.Now()
	b := &n.alarms
	n.mu.Lock()
	if n.draining {
		n.mu.Unlock()
		return
	}
	b.mu.Lock()
	b.rounds++
	relist := b.rounds%relistEvery == 0
	b.mu.Unlock()
	var look []int
	for shard := range n.shards {
		if _, mine := n.held[shard]; mine {
			if relist {
				b.mu.Lock()
				b.loads[shard] = true
				b.mu.Unlock()
			}
			continue
		}
		if holder, _ := n.announcedHolder(shard, now, true); holder == "" && n.pick(shard, "", now) == n.cfg.Node {
			look = append(look, shard)
		}
	}
	n.mu.Unlock()
	b.poke() // the listings asked for, and those that failed
	for _, shard := range look {
		n.adoptShard(shard)
	}
}

// adoptShard takes shard, which no live node announces, if it has entries: at once if its lease is
// free; if a node holds it that does not announce it, the lease is timed here so that the placer
// takes it over once it has stayed unrenewed for LeaseTTL.
func (n *Node) adoptShard(shard int) {
	ctx, cancel := n.bgCtx(opTimeout)
	defer cancel()
	found := errors.New("found")
	err := n.cfg.Log.Alarms(ctx, shard, func(string, time.Time, uint64) error { return found })
	if err != found {
		return // no entries (or no answer): nothing waits for an owner
	}
	rev, val, err := n.cfg.Leases.Get(ctx, shard)
	if err != nil {
		return
	}
	if rev != 0 {
		var v leaseValue
		_ = json.Unmarshal(val, &v)
		n.saw(shard, rev, v.Node, n.cfg.Now())
		n.mu.Lock()
		if s, ok := n.seen[shard]; ok && s.rev == rev {
			s.inc = v.Inc
			n.seen[shard] = s
		}
		n.mu.Unlock()
		return
	}
	n.takeOver(shard, "whose alarms no live node holds")
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// SplitKey returns the namespace and name of an object's log key.
func SplitKey(key string) (ns, name string, ok bool) { return strings.Cut(key, "/") }

// IndexAlarm runs before the batch's local COMMIT when the batch set or moved the object's
// earliest timer to at (Unix ns): the shard's alarm index holds at or an earlier time once it
// returns.
func (x *Object) IndexAlarm(at int64) error { return x.n.ensureAlarm(x.key, x.shard, at) }

// AlarmCommitted is told after the commit the object's earliest timer (0: none left), so that the
// shard's index is made exact.
func (x *Object) AlarmCommitted(at int64) { x.n.alarmCommitted(x.key, x.shard, at) }
