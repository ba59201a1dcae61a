package replica

import (
	"slices"
	"strings"
)

// Member is one row of the roster: a node as this node's table has it.
type Member struct {
	Name     string
	Addr     string // where callers reach it, as its beats say (Config.Advertise); "" if it says none
	Alive    bool   // it beat lately (this node always is)
	Ready    bool   // alive, and says it can serve
	Draining bool   // alive, and says it drains
	Shards   []int  // the shards it holds, if alive, in order
}

// Members returns the nodes this node has heard beat (and this node), by name. A node that
// stopped beating stays, not alive and holding nothing, until it says it closed.
func (n *Node) Members() []Member {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	self := Member{Name: n.cfg.Node, Addr: n.cfg.Advertise, Alive: true, Ready: n.readyLocked(now) == nil, Draining: n.draining}
	for shard := range n.held {
		self.Shards = append(self.Shards, shard)
	}
	slices.Sort(self.Shards)
	out := []Member{self}
	for name, m := range n.members {
		if name == n.cfg.Node {
			continue
		}
		r := Member{Name: name, Addr: m.addr}
		if r.Alive = n.alive(m, now); r.Alive { // what a dead node last said is not so any more
			r.Ready, r.Draining = m.ready, m.draining
			for shard := range m.shards {
				r.Shards = append(r.Shards, shard)
			}
			slices.Sort(r.Shards)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// AddrOf returns the address that node's beats advertise ("" if unknown).
func (n *Node) AddrOf(node string) string {
	if node == n.cfg.Node {
		return n.cfg.Advertise
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.members[node]; m != nil {
		return m.addr
	}
	return ""
}
