package replica

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
