package replica

import "time"

// Owner returns the live node other than this one whose beats name shard's lease, and the lease's
// revision: where a call for an object of the shard should go. It returns "" while this node holds
// the shard, or no live node is known to: then this node may serve it, if it can take the lease.
// Like a refusal, it reads only the table in memory.
func (n *Node) Owner(shard int) (node string, rev uint64) {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.held[shard] != nil {
		return "", 0
	}
	return n.announcedHolder(shard, now, false)
}

// Silent reports whether node, which this node heard beat, has stopped beating (or said it closed):
// a call in flight to it will get no answer. A node never heard of is not gone.
func (n *Node) Silent(node string) bool {
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.members[node]
	return m != nil && !n.alive(m, now)
}

// LeaseTTL is the lease time of the cluster.
func (n *Node) LeaseTTL() time.Duration { return n.cfg.LeaseTTL }
