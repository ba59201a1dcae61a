package core

import (
	"errors"
	"time"

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

	// Log keeps each object's commit records.
	Log replog.Log

	// Leases keeps each shard's owner.
	Leases replog.Leases

	// Beacon carries the nodes' heartbeats: each node's table of who is alive and holds which
	// shard, for refusals from memory and for taking over a dead node's shards.
	Beacon replog.Beacon

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
	return ClusterStats{Commits: s.Commits, Records: s.Records, RecordBytes: s.RecordBytes, PageBytes: s.PageBytes,
		Snapshots: s.Snapshots, HeldLeases: s.HeldLeases, WatchedLeases: s.WatchedLeases, Members: s.Members,
		Ready: rt.cluster.Ready(), Owners: owners}
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
	cfg := replica.Config{Node: r.Node, Log: r.Log, Leases: r.Leases, Beacon: r.Beacon, LeaseTTL: r.LeaseTTL,
		SnapshotEvery: r.SnapshotEvery, Now: rt.now, Logger: rt.log, Evict: rt.evictShard}
	orDefault(&cfg.LeaseTTL, time.Second)
	orDefault(&cfg.SnapshotEvery, 1000)
	n, err := replica.Start(cfg)
	if err != nil {
		return err
	}
	rt.cluster = n
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
