package cluster

// LeadsStream reports whether the node leads stream (of JetStream's default account): a cheaper
// look than Leaders, for tests that time an election.
func (n *Node) LeadsStream(stream string) bool {
	return n.srv.JetStreamIsStreamLeader(globalAccount, stream)
}
