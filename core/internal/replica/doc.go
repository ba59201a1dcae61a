// Package replica is cluster mode's side of the runtime: the shard leases a node holds (lease.go:
// taken when a call needs one, renewed by one goroutine, handed back with a shard's last object),
// the cluster's table it keeps from the nodes' beats (members.go: refusals from memory, takeover of
// a dead node's shards by rendezvous hashing, readiness, drain; handover.go: a shard that belongs to
// another node handed over to it, so that placement converges), the shards' alarm indexes
// (alarms.go: written before a commit that sets an alarm, listed into the runtime's scheduler when
// a shard is taken, a shard with pending alarms kept or adopted), the cluster's dead letters (letters.go: one list
// in the log, appended to by any node), warm takeover (warm.go: the files of the recently active
// objects of the shards this node would take over, kept caught up with their logs), and for each
// resident object an
// Object (object.go) that claims it for a turn (its shard's lease held, local file brought to the
// log's head, epoch record appended), writes its position before a commit, ships the commit's
// pages to its log after it, snapshots and trims the log, and discards the local file when a
// commit fails.
//
// The runtime calls an Object only from the object's turn and lifecycle, holding the object's gate;
// the Object calls back into the runtime's object through Host for the object's database. It
// knows nothing else of the runtime. The engine under it is any replog.Log, replog.Leases and
// replog.Beacon.
//
// # Concurrency
//
//   - The Node owns four goroutines: the renewer (a round every quarter LeaseTTL: renewals, each
//     in a goroutine of its own that the Node waits for, then a beat), the placer (every eighth
//     LeaseTTL, or at once when a shard is handed to this node: takeovers of dead nodes' shards
//     and of shards handed over, each in a goroutine of its own that the Node waits for (at most
//     one per shard, so that a shard whose stream elects a leader holds up no other), hand-overs,
//     closing a shard's idle objects through Config.Evict),
//     the warmer (every LeaseTTL: the catch-ups of the files of the objects the holders of the
//     shards this node would take over name in their beats, one object at a time, warmMax at most;
//     it only reads the log) and the beacon's listener; after ServeAlarms three more: the alarm
//     worker, which starts a lister for each shard to list (a goroutine of its own per shard, that
//     ends once the shard is listed or gone: a listing slow on one shard delays no other), the
//     exact writer (entries made exact after commits) and the alarm sweeper (every 2 LeaseTTL:
//     shards with alarms and no live holder). Close stops them all and waits for them and for the
//     listers (for the warmer, after its catch-up under way).
//   - n.mu guards the tables (held, seen, members, and the hand-overs') and each lease's refs; a lease's own mu its
//     revision and validity; a lease's renewing serializes its renewal and its release; n.takes
//     serializes the takes of one shard, so that two objects of a shard never race for its lease;
//     a log state's mu (facets.go) is held across each read of the log into a file, the warmer's
//     catch-ups too, which run only while no Object of the key is resident here: an activation
//     that comes meanwhile waits for the catch-up at its claim, then brings the file up itself;
//     the alarm book's mu (what the node knows of its shards' alarm entries) comes after n.mu.
package replica
