package faults

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The room of the runtime target: a namespace of rooms (package patterns/room), mounted at /room/
// on every node, each room's history long enough for a member away through a takeover to resume,
// and each connection's send queue long enough for that replay.
const (
	roomNS        = "rooms"
	roomHistory   = 2048
	roomSendQueue = 4096
)

func withRooms(rooms, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/room/", rooms)
	mux.Handle("/", next)
	return mux
}

// RoomConfig configures RunRoomFailover.
type RoomConfig struct {
	Nodes   int           // node processes (default 3)
	Shards  int           // streams of the log (default 16)
	Members int           // members per node, each sending (default 2)
	Every   time.Duration // how often each member sends a message while connected (default 50 ms)
	Kills   int           // how many times the room's owner is killed (default 10)
	Cap     time.Duration // how long the room is waited for after a kill (default 60 s)
	Logf    func(format string, args ...any)
}

// RoomKill is one kill of the room's owner, and what the members saw of it.
type RoomKill struct {
	Victim      string
	Took        time.Duration // from the kill to the first message acknowledged whose send began after it
	Served      bool          // false: none within the cap
	Moved       int           // members whose edge was the victim, which reconnected elsewhere
	Resumed     time.Duration // the longest time from the kill until such a member was connected again
	Sent, Acked int           // messages sent and acknowledged between this kill and the next
}

// RoomReport is what RunRoomFailover measured and found.
type RoomReport struct {
	Kills    []RoomKill
	Members  int
	Offset   int64 // the room's last offset at the end
	Acked    int   // messages acknowledged to their senders
	Sent     int   // messages sent
	Skips    int   // live messages that skipped offsets, each repaired by resuming from the last one
	Problems []string
}

// Table formats the per-kill figures.
func (r *RoomReport) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %-8s %10s %6s %10s %7s %7s\n", "kill", "victim", "first ack", "moved", "resumed", "sent", "acked")
	var took []time.Duration
	for i, k := range r.Kills {
		t := fmt.Sprint(k.Took.Round(time.Millisecond))
		if !k.Served {
			t = "none"
		}
		fmt.Fprintf(&b, "%-5d %-8s %10s %6d %10s %7d %7d\n", i, k.Victim, t, k.Moved, k.Resumed.Round(time.Millisecond), k.Sent, k.Acked)
		took = append(took, k.Took)
	}
	if len(took) > 0 {
		slices.Sort(took)
		fmt.Fprintf(&b, "first ack after a kill: p50 %v, max %v; %d members, %d messages sent, %d acknowledged, last offset %d, %d skips repaired\n",
			took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), r.Members, r.Sent, r.Acked, r.Offset, r.Skips)
	}
	return b.String()
}

// roomFailover is a run of RunRoomFailover.
type roomFailover struct {
	*Cluster
	cfg     RoomConfig
	members []*member
	url     func(node int) string

	mu    sync.Mutex
	down  map[int]bool // nodes killed and not ready again: members do not dial them, and their ends are expected
	kills []time.Time
}

// RunRoomFailover starts cfg.Nodes node processes of the runtime target, joins cfg.Members
// WebSocket clients on every node to one room, each sending a message every cfg.Every, and
// SIGKILLs the node that owns the room cfg.Kills times, starting it again after the room serves
// again. A member whose edge (the node it is connected to) was killed reconnects to another node,
// resuming from the last offset it received, and moves back to its own node once that is ready
// again (closing its connection itself). What a member sees is checked: a member on a node that
// was not killed is never closed; every member ends at the room's last offset, having received
// every offset after the one it joined at once and in order, each offset the same message for every
// member, each acknowledged message (its sender received it) at the offset its sender saw; no
// member is told that the history no longer reaches back to its offset.
func RunRoomFailover(t testing.TB, cfg RoomConfig) *RoomReport {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	if cfg.Members == 0 {
		cfg.Members = 2
	}
	if cfg.Every == 0 {
		cfg.Every = 50 * time.Millisecond
	}
	if cfg.Kills == 0 {
		cfg.Kills = 10
	}
	if cfg.Cap == 0 {
		cfg.Cap = time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	c := StartCluster(t, cfg.Nodes, cfg.Shards, cfg.Logf)
	f := &roomFailover{Cluster: c, cfg: cfg, down: map[int]bool{}}
	f.url = func(node int) string {
		return fmt.Sprintf("ws://127.0.0.1:%d/room/lobby", c.h.procs[node].spec.ServePort)
	}
	rep := &RoomReport{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stop()
		for _, m := range f.members {
			m.hangUp()
		}
		wg.Wait()
	}()
	for node := range cfg.Nodes {
		for i := range cfg.Members {
			m := &member{f: f, name: fmt.Sprintf("%s-m%d", c.names[node], i), home: node, at: -1, last: -1,
				joined: -1, acks: map[string]ack{}, sent: map[string]time.Time{}}
			f.members = append(f.members, m)
			wg.Go(func() { m.run(ctx) })
			wg.Go(func() { m.send(ctx, cfg.Every) })
		}
	}
	rep.Members = len(f.members)

	for k := range cfg.Kills {
		f.WaitReady(3 * time.Minute)
		f.homeAll(t)
		f.settle(t, time.Now())
		victim := f.roomOwner(t)
		p := c.h.procs[victim]
		var onVictim []*member
		for _, m := range f.members {
			if m.connectedAt() == victim {
				onVictim = append(onVictim, m)
			}
		}
		f.mu.Lock()
		f.down[victim] = true
		f.mu.Unlock()
		t0 := time.Now()
		p.kill()
		f.mu.Lock()
		f.kills = append(f.kills, t0)
		f.mu.Unlock()
		rk := RoomKill{Victim: c.names[victim]}
		for {
			if a, ok := f.firstAck(t0); ok {
				rk.Took, rk.Served = a.Sub(t0), true
				break
			}
			if time.Since(t0) > cfg.Cap {
				rk.Took = cfg.Cap
				rep.Problems = append(rep.Problems, fmt.Sprintf("kill %d of %s: no message acknowledged within %v", k, rk.Victim, cfg.Cap))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		rk.Moved, rk.Resumed = len(onVictim), f.moved(t0, onVictim, cfg.Cap)
		f.h.launch(p)
		f.WaitReady(3 * time.Minute)
		f.mu.Lock()
		delete(f.down, victim)
		f.mu.Unlock()
		cfg.Logf("faults: room: kill %d: %s owned the room; first ack after %v; %d members moved, connected again within %v",
			k, rk.Victim, rk.Took.Round(time.Millisecond), rk.Moved, rk.Resumed.Round(time.Millisecond))
		rep.Kills = append(rep.Kills, rk)
	}
	f.WaitReady(3 * time.Minute)
	f.homeAll(t)
	f.settle(t, time.Now())
	f.quiesce(t)
	f.check(rep)
	return rep
}

// roomOwner returns the node that owns the room's shard as most nodes' tables say, waiting for one.
func (f *roomFailover) roomOwner(t testing.TB) int {
	h := fnv.New32a()
	h.Write([]byte(roomNS + "/lobby"))
	shard := int(h.Sum32() % uint32(f.cfg.Shards))
	deadline := time.Now().Add(time.Minute)
	for {
		votes := map[string]int{}
		for _, st := range f.statuses() {
			votes[st.Owners[shard]]++
		}
		for name, n := range votes {
			if name != "" && 2*n > len(f.names) {
				return slices.Index(f.names, name)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("faults: room: no owner of shard %d that most nodes agree on within a minute: %v", shard, votes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// homeAll has every member that is away from its own node move back to it, and waits until every
// member is connected at its own node.
func (f *roomFailover) homeAll(t testing.TB) {
	deadline := time.Now().Add(time.Minute)
	for {
		home := 0
		for _, m := range f.members {
			if m.connectedAt() == m.home {
				home++
			} else {
				m.goHome()
			}
		}
		if home == len(f.members) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("faults: room: %d of %d members not connected at their own node within a minute", len(f.members)-home, len(f.members))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until every member has had a message acknowledged that it sent after since.
func (f *roomFailover) settle(t testing.TB, since time.Time) {
	deadline := since.Add(2 * time.Minute)
	for _, m := range f.members {
		for !m.ackedSince(since) {
			if time.Now().After(deadline) {
				t.Fatalf("faults: room: %s had no message acknowledged within 2 minutes of every node being ready", m.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// firstAck returns when the first message sent at or after t0 was acknowledged, by any member.
func (f *roomFailover) firstAck(t0 time.Time) (time.Time, bool) {
	var first time.Time
	for _, m := range f.members {
		if a, ok := m.firstAck(t0); ok && (first.IsZero() || a.Before(first)) {
			first = a
		}
	}
	return first, !first.IsZero()
}

// moved waits until every member of lost is connected again by a connection made after t0, and
// returns how long the last took from t0.
func (f *roomFailover) moved(t0 time.Time, lost []*member, within time.Duration) time.Duration {
	var longest time.Duration
	for _, m := range lost {
		for {
			if at, ok := m.connectedSince(t0); ok {
				longest = max(longest, at.Sub(t0))
				break
			}
			if time.Since(t0) > within {
				longest = within
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return longest
}

// quiesce stops the members' messages and waits until every member has received the room's last
// offset, and it has stayed the last for a second (within a minute; check says who fell short).
func (f *roomFailover) quiesce(t testing.TB) {
	for _, m := range f.members {
		m.quiet.Store(true)
	}
	deadline := time.Now().Add(time.Minute)
	stable := 0
	var prev int64 = -1
	for stable < 10 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		lo, hi := int64(-1), int64(-1)
		for i, m := range f.members {
			m.mu.Lock()
			if i == 0 || m.last < lo {
				lo = m.last
			}
			hi = max(hi, m.last)
			for _, a := range m.order {
				hi = max(hi, a.offset)
			}
			m.mu.Unlock()
		}
		if lo == hi && hi == prev {
			stable++
		} else {
			stable = 0
		}
		prev = hi
	}
	if stable < 10 {
		t.Logf("faults: room: the members did not all reach the room's last offset within a minute")
	}
}

// isDown reports whether node was killed and is not ready again.
func (f *roomFailover) isDown(node int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down[node]
}

// check decides what the members saw, into rep.
func (f *roomFailover) check(rep *RoomReport) {
	byOffset := map[int64]string{}
	var end int64 = -1
	for _, m := range f.members {
		m.mu.Lock()
		end = max(end, m.last)
		m.mu.Unlock()
	}
	rep.Offset = end
	kills := f.kills
	for _, m := range f.members {
		m.mu.Lock()
		rep.Skips += m.skips
		rep.Sent += len(m.sent)
		rep.Acked += len(m.acks)
		for _, e := range m.ends {
			if !e.client && !e.edgeDown {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s, connected at %s, which was not killed, was closed at %s: %s",
					m.name, f.names[e.node], e.at.Format("15:04:05.000"), e.why))
			}
		}
		if m.gap != "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the history no longer reached back to its offset: %s", m.name, m.gap))
		}
		if m.last != end {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s ended at offset %d, the room at %d", m.name, m.last, end))
		}
		for i, d := range m.got {
			if d.offset != m.joined+1+int64(i) {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: its %d-th message has offset %d after joining at %d", m.name, i, d.offset, m.joined))
				break
			}
			if prev, ok := byOffset[d.offset]; ok && prev != d.data {
				rep.Problems = append(rep.Problems, fmt.Sprintf("offset %d is %q for one member, %q for %s", d.offset, prev, d.data, m.name))
			}
			byOffset[d.offset] = d.data
		}
		m.mu.Unlock()
	}
	for _, m := range f.members {
		m.mu.Lock()
		for msg, a := range m.acks {
			if got := byOffset[a.offset]; got != msg {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %q acknowledged at offset %d, which members received as %q", m.name, msg, a.offset, got))
			}
		}
		m.mu.Unlock()
	}
	// Between kills: messages sent and acknowledged.
	for i := range rep.Kills {
		from, to := kills[i], time.Now()
		if i+1 < len(kills) {
			to = kills[i+1]
		}
		for _, m := range f.members {
			m.mu.Lock()
			for msg, at := range m.sent {
				if !at.Before(from) && at.Before(to) {
					rep.Kills[i].Sent++
					if _, ok := m.acks[msg]; ok {
						rep.Kills[i].Acked++
					}
				}
			}
			m.mu.Unlock()
		}
	}
	sort.Strings(rep.Problems)
}
