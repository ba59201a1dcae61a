package core

import (
	"errors"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog"
)

// Replication makes a runtime one node of a cluster: every object's commits are records in a
// replicated log, shipped before the commit's output is released, and one node at a time owns an
// object's shard, under the shard's lease. Set Options.Replication to use it; nil (the default) is
// the single-process runtime, unchanged.
//
// The runtime needs only the three narrow interfaces of package replog from the engine that
// replicates; package cluster fills them with NATS JetStream (embedded or external). Another engine
// can fill them too: the runtime relies on nothing but what their documentation says.
type Replication struct {
	// Node names this node among the cluster's (required, unique). It is the lease holder's name.
	Node string

	// Advertise is where this node's callers reach it, such as the base URL of its HTTP server
	// (http://10.0.0.2:8787); optional. Its beats carry it, so that every node can name it in a
	// refusal (NotOwnerError.Address, the 421 of Stub.ServeHTTP) and in Stats' Cluster.Nodes.
	Advertise string

	// Log keeps each object's commit records.
	Log replog.Log

	// Leases keeps each shard's owner.
	Leases replog.Leases

	// Beacon carries the nodes' heartbeats: each node's table of who is alive and holds which
	// shard, for refusals from memory and for taking over a dead node's shards.
	Beacon replog.Beacon

	// Calls, if set, carries calls between the nodes: a method (Define) called on any node runs on
	// the node that owns the object's shard, and Stub.ServeHTTP relays a request to it. Nil keeps
	// every call local: a call for an object another node owns fails with ErrNotOwner, naming the
	// owner.
	Calls replog.Calls

	// CallTimeout bounds one attempt at sending a call to another node and waiting for its reply
	// (default 10 s); the call's context bounds them all. An attempt whose reply does not come is
	// sent again with the same request id: the owner answers it with the first one's reply, once
	// that has run, and never runs it twice.
	CallTimeout time.Duration

	// CallAttempts bounds the sends of one call (default 4): to the owner named by a "moved"
	// answer, again after ErrFenced (the object moved while it ran) or a reply that did not come.
	// A call whose attempts run out fails with the last one's error (ErrUnreachable for a node that
	// could not be reached). Between two attempts after a failure the caller waits an eighth of the
	// lease time, doubling up to half of it, so the default attempts span seven eighths of one.
	CallAttempts int

	// CallMemory is how many calls from other nodes a node remembers (their request ids and
	// replies), to answer a request sent again without running it twice (default 4096), each for
	// at most CallMemoryFor (default 1 min).
	CallMemory    int
	CallMemoryFor time.Duration

	// NoHTTPRelay keeps Stub.ServeHTTP from relaying requests to the object's owner: an object
	// another node owns answers 421, naming it, as without Calls.
	NoHTTPRelay bool

	// MaxRelayBody bounds the body of an HTTP request relayed to the owner (default 1 MiB, and at
	// most what Calls carries): a longer one is answered 413, and not sent.
	MaxRelayBody int64

	// LeaseTTL is how long a shard's lease lasts unrenewed (default 1 s). A node serves an object
	// only while its shard's lease is valid by the node's own clock (LeaseTTL less an eighth after
	// the renewal began, renewals every quarter); another node takes a shard over only after it has
	// seen the lease unrenewed for LeaseTTL by its own clock. Failover takes about this long, plus
	// the time to read the object's log. The eighth is the margin for clocks that run at different
	// rates: it covers rates that differ by up to 12%.
	LeaseTTL time.Duration

	// SnapshotEvery is how many commit records an object's log may hold before the owner writes a
	// snapshot and trims the records before it (default 1000).
	SnapshotEvery int
}

// ClusterStats are cluster mode's counters over the runtime's life, in Stats (zero without
// Options.Replication).
type ClusterStats struct {
	Node   string // this node's Replication.Node
	Shards int    // the number of shards (Replication.Log's)

	Commits     int64 // commits shipped to the log
	Records     int64 // records they took (a commit over replog.MaxRecordBytes takes several)
	RecordBytes int64 // their size, as appended
	PageBytes   int64 // the page images they carried, before compression
	Snapshots   int64 // snapshots written

	// HeldLeases is the number of shard leases this node holds now: the shards of its resident
	// objects, and those it took over from a dead node.
	HeldLeases int64
	// WatchedLeases is the number of other nodes' shard leases this node is timing for the takeover
	// rule: those it read or heard of in the last 2 LeaseTTL.
	WatchedLeases int64
	// Members is the number of nodes this node hears beat, itself included.
	Members int64

	// Ready is nil once this node can serve (it has heard the other nodes' beats, its engine
	// answers, it does not drain), and says why not otherwise.
	Ready error
	// Owners is this node's table: each shard held by a live node, and that node's name.
	Owners map[int]string
	// Nodes are the members this node has heard beat, itself included, by name: a node that
	// stopped beating stays, not alive and holding nothing, until it says it closed.
	Nodes []ClusterMember
}

// ClusterMember is a node of the cluster as this node's table has it, from its beats.
type ClusterMember struct {
	Name     string // its Replication.Node
	Address  string // its Replication.Advertise ("" if it advertises none)
	Alive    bool   // it beat within the last three quarters of LeaseTTL
	Ready    bool   // it is alive and says it can serve (see ClusterStats.Ready)
	Draining bool   // it is alive and hands its shards over, taking none
	Shards   []int  // the shards it holds, if alive, in order
}

// clusterStats reads cluster mode's counters.
func (rt *Runtime) clusterStats() ClusterStats {
	if rt.cluster == nil {
		return ClusterStats{}
	}
	s := rt.cluster.Stats()
	owners := map[int]string{}
	for _, o := range rt.cluster.Table() {
		owners[o.Shard] = o.Node
	}
	var nodes []ClusterMember
	for _, m := range rt.cluster.Members() {
		nodes = append(nodes, ClusterMember{Name: m.Name, Address: m.Addr, Alive: m.Alive, Ready: m.Ready, Draining: m.Draining, Shards: m.Shards})
	}
	return ClusterStats{Node: rt.opts.Replication.Node, Shards: rt.opts.Replication.Log.Shards(), Commits: s.Commits, Records: s.Records, RecordBytes: s.RecordBytes, PageBytes: s.PageBytes,
		Snapshots: s.Snapshots, HeldLeases: s.HeldLeases, WatchedLeases: s.WatchedLeases, Members: s.Members,
		Ready: rt.cluster.Ready(), Owners: owners, Nodes: nodes}
}

// validate checks the options of cluster mode at Open.
func (r *Replication) validate() error {
	if r == nil {
		return nil
	}
	switch {
	case r.Node == "":
		return errors.New("core: Options.Replication.Node is required")
	case r.Log == nil:
		return errors.New("core: Options.Replication.Log is nil")
	case r.Leases == nil:
		return errors.New("core: Options.Replication.Leases is nil")
	case r.Beacon == nil:
		return errors.New("core: Options.Replication.Beacon is nil")
	case r.LeaseTTL < 0 || r.SnapshotEvery < 0:
		return errors.New("core: Options.Replication.LeaseTTL and SnapshotEvery must not be negative")
	case r.CallTimeout < 0 || r.CallAttempts < 0 || r.CallMemory < 0 || r.CallMemoryFor < 0 || r.MaxRelayBody < 0:
		return errors.New("core: Options.Replication's call settings must not be negative")
	}
	return nil
}

// openReplication starts cluster mode, if configured: its lease renewer, placer and beacon
// listener run until Shutdown.
func (rt *Runtime) openReplication() error {
	r := rt.opts.Replication
	if r == nil {
		return nil
	}
	cfg := replica.Config{Node: r.Node, Advertise: r.Advertise, Log: r.Log, Leases: r.Leases, Beacon: r.Beacon, LeaseTTL: r.LeaseTTL,
		SnapshotEvery: r.SnapshotEvery, Now: rt.now, Logger: rt.log, Evict: rt.evictShard, HandOff: rt.handOff, LocalFile: rt.localFile, Replaced: rt.forgetFile}
	cfg.LeaseTTL = r.leaseTTL()
	orDefault(&cfg.SnapshotEvery, 1000)
	n, err := replica.Start(cfg)
	if err != nil {
		return err
	}
	rt.cluster = n
	if r.Calls != nil {
		if !r.NoHTTPRelay {
			rt.ws.relay = newWSRelay(rt, r)
		}
		if rt.router, err = startRouter(rt, r); err != nil {
			n.Close()
			return err
		}
	}
	return nil
}

// evictShard closes the idle resident objects of shard, which this node hands over to another:
// the last one closed hands the shard's lease back. Busy ones are closed once idle, by a later call.
func (rt *Runtime) evictShard(shard int) {
	if rt.isClosed.Load() {
		return // Shutdown closes every object itself
	}
	for _, ns := range rt.snapshotNamespaces() {
		for _, o := range ns.snapshot() {
			if o.inShard(shard) && o.tryEvict() {
				o.evict("handover")
			}
		}
	}
}

// localFile returns the path of the database file of the top-level object ns/name, for a warm
// catch-up; "" if ns is not registered here.
func (rt *Runtime) localFile(nsName, name string) string {
	rt.mu.RLock()
	ns := rt.namespaces[nsName]
	rt.mu.RUnlock()
	if ns == nil {
		return ""
	}
	return datadir.DBFile(ns.dir, objectID(nsName, name))
}

// leaseTTL is the lease time in force.
func (r *Replication) leaseTTL() time.Duration {
	if r.LeaseTTL > 0 {
		return r.LeaseTTL
	}
	return time.Second
}
