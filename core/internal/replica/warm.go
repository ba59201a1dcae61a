package replica

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/sqlstore"
)

// Warm takeover. A shard's next owner (the node placement would give the shard if its holder died:
// pick without the holder) keeps the local files of the shard's recently active objects caught up
// with their logs, so that a takeover's first call to one of them reads only the records appended
// since the last catch-up, not the log since its last snapshot:
//   - the holder's beats name, for each shard it holds, its resident objects most recently
//     committed to or taken over here, warmPerShard at most, warmBeatBytes in all;
//   - every LeaseTTL the warmer (one goroutine of the Node's) catches up the objects named by the
//     live holders of the shards this node is next owner of, warmMax at most, one at a time: a
//     read of the log's last record, and, if it moved since the last catch-up, a read of the
//     records after the file's position into the file (or, without a file at a position, a build
//     from the last snapshot and the records after it, into a new file);
//   - a catch-up only reads the log, and writes nothing but the local file. It runs only while no
//     Object of the key is resident here, under the key's logState.mu: an activation that comes
//     meanwhile waits for it at its claim (openEpoch), and then brings the file to the log's head
//     itself, by the rule every claim follows (CL6): warmth saves reading, it is never trusted;
//   - a file this node stops catching up (its object no longer named, or the shard's next owner
//     another node) stays in the directory, as an evicted object's file stays: a cache, caught up
//     or rebuilt at its next claim.

const (
	// warmPerShard bounds the objects a beat names per shard.
	warmPerShard = 8
	// warmBeatBytes bounds the bytes of the object keys a beat names, within replog.MaxBeatBytes.
	warmBeatBytes = 8 << 10
	// warmMax bounds the objects a node keeps warm: each catch-up opens the file and reads the log.
	warmMax = 64
)

// warmer catches up, every LeaseTTL, the files of the objects this node is next owner of. Close
// stops it and waits for it; a catch-up under way finishes first.
func (n *Node) warmer() {
	reached := map[string]uint64{} // by key: the log's last record at the last catch-up of its file
	t := time.NewTicker(n.cfg.LeaseTTL)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		keys := n.warmKeys()
		for key := range reached {
			if !slices.Contains(keys, key) {
				delete(reached, key) // not caught up any more: its file stays, a cache (CL6)
			}
		}
		for _, key := range keys {
			select {
			case <-n.stop:
				return
			default:
			}
			seq, err := n.warmUp(key, reached[key])
			if err != nil {
				n.cfg.Logger.Debug("an object's file could not be kept warm", "event", "warm_failed", "key", key, "error", err)
				delete(reached, key)
				continue
			}
			reached[key] = seq
		}
	}
}

// warmKeys lists the objects to keep warm: those that the live holders of shards this node would
// take over name in their beats, by shard, warmMax at most.
func (n *Node) warmKeys() []string {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.draining {
		return nil
	}
	byShard := map[int][]string{}
	for name, m := range n.members {
		if name == n.cfg.Node || !n.alive(m, now) {
			continue
		}
		for shard, keys := range m.warm {
			if _, holds := m.shards[shard]; !holds {
				continue
			}
			if _, mine := n.held[shard]; mine {
				continue
			}
			if n.pick(shard, name, now) == n.cfg.Node {
				byShard[shard] = keys
			}
		}
	}
	var out []string
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		for _, key := range byShard[shard] {
			if len(out) == warmMax {
				return out
			}
			if n.cfg.Log.ShardOf(key) == shard && !slices.Contains(out, key) {
				out = append(out, key)
			}
		}
	}
	return out
}

// warmList returns the keys a beat names for the shards in held: the resident objects most
// recently committed to or taken over here, warmPerShard per shard at most, warmBeatBytes in all.
// n.mu is not held.
func (n *Node) warmList(held map[int]uint64) map[int][]string {
	type resident struct {
		key    string
		shard  int
		active int64
	}
	var rs []resident
	n.mu.Lock()
	for key, lg := range n.logs {
		if a := lg.active.Load(); a != 0 {
			rs = append(rs, resident{key: key, active: a})
		}
	}
	n.mu.Unlock()
	for i := range rs {
		rs[i].shard = n.cfg.Log.ShardOf(rs[i].key)
	}
	slices.SortFunc(rs, func(a, b resident) int {
		return cmp.Or(cmp.Compare(b.active, a.active), cmp.Compare(a.key, b.key))
	})
	var out map[int][]string
	budget := warmBeatBytes
	for _, r := range rs {
		if _, ok := held[r.shard]; !ok || len(out[r.shard]) >= warmPerShard {
			continue
		}
		b, _ := json.Marshal(r.key)
		if budget -= len(b) + 1; budget < 0 {
			break
		}
		if out == nil {
			out = map[int][]string{}
		}
		out[r.shard] = append(out[r.shard], r.key)
	}
	return out
}

// warmUp brings the local file of key to its log's last record, unless no record was appended
// since reached (the last record at its previous catch-up) and the file is there. It returns the
// last record read, or reached if it read none. It does nothing while an Object of key is resident
// here: that Object's claims keep its file.
func (n *Node) warmUp(key string, reached uint64) (uint64, error) {
	ns, name, ok := SplitKey(key)
	if !ok || n.cfg.LocalFile == nil {
		return reached, nil
	}
	path := n.cfg.LocalFile(ns, name)
	if path == "" { // its namespace is not registered here
		return reached, nil
	}
	ctx, cancel := n.bgCtx(opTimeout)
	last, _, err := n.cfg.Log.Last(ctx, key)
	cancel()
	if err != nil {
		return reached, fmt.Errorf("read the log's last record: %w", err)
	}
	if last == reached && reached != 0 {
		if _, err := os.Stat(path); err == nil {
			return reached, nil
		}
	}
	lg := n.attachWarm(key)
	if lg == nil {
		return reached, nil // resident here
	}
	defer n.detach(key, lg)
	lg.mu.Lock()
	defer lg.mu.Unlock()
	n.mu.Lock()
	alone := lg.refs == 1
	n.mu.Unlock()
	if !alone { // an activation came meanwhile: it waits for lg.mu, and brings the file up itself
		return reached, nil
	}
	x := &Object{n: n, log: lg, key: key, shard: n.cfg.Log.ShardOf(key), path: path, ns: ns, name: name}
	h := warmHost{n: n, path: path}
	if st, prev, batch, _, ok := x.openLocal(h); ok {
		end, at, st, err := x.read(path, prev, &batch, st, "")
		if st != nil {
			st.Close()
		}
		if err != nil {
			return 0, err
		}
		if at {
			return end.seq, nil
		}
	}
	end, _, _, err := x.replay(h, 0, nil, nil) // no file at a record of the log: built anew
	if err != nil {
		return 0, err
	}
	return end.seq, nil
}

// attachWarm returns a new log state for key, held for a catch-up, or nil if an Object of key is
// resident here.
func (n *Node) attachWarm(key string) *logState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.logs[key] != nil {
		return nil
	}
	if n.logs == nil {
		n.logs = map[string]*logState{}
	}
	lg := &logState{refs: 1}
	n.logs[key] = lg
	return lg
}

// errNoWarmFile is returned by a catch-up's open of a file removed meanwhile: it is built instead.
var errNoWarmFile = errors.New("core: no local file")

// warmHost is the Host of a catch-up: the local file of an object not resident here, opened only
// to read its position and fold its write-ahead log in, before the log's pages are written to it.
type warmHost struct {
	n    *Node
	path string
}

func (h warmHost) OpenDB() (*sqlstore.DB, bool, error) {
	for _, check := range []func(string) (string, error){datadir.HeaderDamage, datadir.WALHeaderDamage} {
		if why, err := check(h.path); err != nil {
			return nil, false, err
		} else if why != "" {
			return nil, false, fmt.Errorf("core: damaged local file: %s", why)
		}
	}
	st, err := sqlstore.Open(h.path, "NORMAL", "_durable_", func() ([]byte, error) { return nil, errNoWarmFile })
	return st, false, err
}

func (h warmHost) AdoptDB(st *sqlstore.DB, _ bool) { st.Close() }
func (warmHost) CloseDB()                          {}
func (warmHost) WaitClosed()                       {}
func (warmHost) Indexed()                          {}

func (h warmHost) Replaced() {
	if h.n.cfg.Replaced != nil {
		h.n.cfg.Replaced(h.path)
	}
}
