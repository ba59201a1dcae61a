package core

import (
	"errors"
	"time"

	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog"
)

// Replication makes a runtime one node of a cluster: every object's commits are records in a
// replicated log, shipped before the commit's output is released, and one node at a time owns an
// object, under a lease. Set Options.Replication to use it; nil (the default) is the
// single-process runtime, unchanged.
//
// The runtime needs only the two narrow interfaces of package replog from the engine that
// replicates; package cluster fills them with NATS JetStream (embedded or external). Another engine
// can fill them too: the runtime relies on nothing but what their documentation says.
type Replication struct {
	// Node names this node among the cluster's (required, unique). It is the lease holder's name.
	Node string

	// Log keeps each object's commit records.
	Log replog.Log

	// Leases keeps each object's owner.
	Leases replog.Leases

	// LeaseTTL is how long a lease lasts unrenewed (default 4 s). A node serves an object only while
	// its lease is valid by the node's own clock; another node takes an object over only after it
	// has seen the lease unrenewed for LeaseTTL by its own clock. Failover takes about this long.
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

	// HeldLeases is the number of leases this node holds now (its resident objects').
	HeldLeases int64
	// WatchedLeases is the number of other nodes' leases this node is timing for the takeover rule:
	// those it read in the last 2 LeaseTTL, for calls it refused.
	WatchedLeases int64
}

// clusterStats reads cluster mode's counters.
func (rt *Runtime) clusterStats() ClusterStats {
	if rt.cluster == nil {
		return ClusterStats{}
	}
	s := rt.cluster.Stats()
	return ClusterStats{Commits: s.Commits, Records: s.Records, RecordBytes: s.RecordBytes, PageBytes: s.PageBytes,
		Snapshots: s.Snapshots, HeldLeases: s.HeldLeases, WatchedLeases: s.WatchedLeases}
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
	case r.LeaseTTL < 0 || r.SnapshotEvery < 0:
		return errors.New("core: Options.Replication.LeaseTTL and SnapshotEvery must not be negative")
	}
	return nil
}

// openReplication starts cluster mode, if configured: its lease renewer runs until Shutdown.
func (rt *Runtime) openReplication() {
	r := rt.opts.Replication
	if r == nil {
		return
	}
	cfg := replica.Config{Node: r.Node, Log: r.Log, Leases: r.Leases, LeaseTTL: r.LeaseTTL, SnapshotEvery: r.SnapshotEvery,
		Now: rt.now, Logger: rt.log}
	orDefault(&cfg.LeaseTTL, 4*time.Second)
	orDefault(&cfg.SnapshotEvery, 1000)
	rt.cluster = replica.Start(cfg)
}
