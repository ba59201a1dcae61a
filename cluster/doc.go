// Package cluster keeps the replicated log, the leases and the heartbeats of the runtime's cluster
// mode (core.Replication) in NATS JetStream, embedded in the process or external.
//
// # The engine
//
// An Engine fills replog.Log, replog.Leases, replog.Beacon and replog.Calls:
//
//   - The keys are spread over a fixed number of shards (Config.Shards), by an FNV-1a hash of the
//     key. Each shard is one stream, "<prefix>_log_<n>": one raft group, that keeps the shard's
//     keys' records (a subject per key), their blobs, their alarm entries and the shard's lease,
//     so that the loss of one stream's leader stalls that shard and no other.
//   - Append publishes with the expected last sequence of the key's subject, so that among racing
//     writers exactly one wins; a refusal is replog.ErrConflict once a read through the quorum
//     shows another record after the one expected, and an acknowledgement that did not come (an
//     attempt's timeout, a dropped connection) is replog.ErrUnknown (the record is sent again only
//     after a refusal that stored nothing).
//   - Last and Leases.Get are linearizable: they write a small barrier through the stream's
//     quorum, then read the last record as of the barrier from a replica that has it, so that a
//     leader cut off from the others never answers with a stale record.
//   - Read brings a key's records in batches (512 per round trip) from any replica, by direct
//     gets, up to the last record there was when it began; Trim purges a key's subject before a
//     sequence.
//   - A shard's lease is the subject "<prefix>.log.<n>.lease" of its stream, written with the
//     expected last sequence (compare-and-set) and rolled up, so that one message stays; its
//     revisions are stream sequences and never repeat (a delete is a marker message, which the
//     next creation expects).
//   - A blob (a snapshot) is kept in its key's shard: chunks of 256 KiB, then a manifest that names
//     them, their size and SHA-256; it may be far larger than a message. GetBlob reads the
//     manifest through the quorum and the chunks by direct gets, and checks the digest. A blob
//     put again under its name replaces it, and the old chunks are purged.
//   - A key's alarm entry is the subject "<prefix>.log.<n>.a.<h>.<key>" of its shard's stream
//     (h: one hex digit of a hash of the key), written like a lease (compare-and-set, rolled up;
//     a removal is a marker that expires after an hour). Alarms lists a shard's entries by one
//     batched direct get of each subject's last message up to a read barrier, and of the barrier
//     (an answer without it comes from a replica that has not applied it yet, which may lack
//     entries: another replica is asked), by the 16 groups of h, one after the other, past the
//     1,024 subjects a server answers at once: at most 16,368 entries per shard.
//   - The beacon is plain NATS: Beat publishes on "<prefix>.beat", Listen subscribes. No stream,
//     no leader, no quorum: a node that lost its quorum still beats and hears the others.
//   - Calls between nodes (replog.Calls) are plain NATS request-reply: a node is served on one
//     subject, "<prefix>.call.<node>", with one subscription for all of its objects, each request
//     handled on a goroutine of its own; the requests a node sends, and its replies, that are
//     ready at once go to the server in one write. No responders is replog.ErrUnreachable, a
//     reply that did not come replog.ErrNoReply; a request or reply over the connection's maximum
//     payload (less 8 KiB for the subject and headers) is refused, never cut.
//
// Nothing on the path of a call needs the JetStream meta leader: appends, barriers and lease writes
// go to the stream's leader, reads are direct gets that any replica answers, and a purge (Trim,
// blobs) goes to the stream's leader. Only New (creating or updating streams) and Leaders need it.
//
// Every stream has Config.Replicas replicas (default 3), and every node started by StartNode syncs
// every write to disk before it acknowledges it (JetStream's "sync_interval: always"; its default,
// a sync every two minutes, can lose acknowledged writes when machines fail together).
//
// # When a leader is lost
//
// A stream whose leader dies takes no writes until its followers elect another, which takes
// seconds (nats-server waits 4 to 9 s before a follower campaigns). The engine never waits longer
// than it must: each attempt (one publish and its acknowledgement, one read of a replica, one
// purge) is bounded by Config.AttemptTimeout (default 1.5 s). A publish that finds no leader (no
// responders) stored nothing and is sent again, with a backoff, until the call's context ends; so
// is a read, a purge, and a read barrier; an append or a lease write whose acknowledgement did not
// come is replog.ErrUnknown at once. A direct get or a barrier without an answer is sent again
// every 200 ms within its attempt, each with a reply subject of its own: a stopped node's peers go
// on routing requests to it until they give up its route, which takes minutes. So a call comes
// back within about an attempt of the stream taking writes again. Config.Timeout (default 10 s)
// bounds a call whose context has no deadline.
//
// For a planned stop, Node.Drain hands the node's leaderships over first: each stream it leads
// steps down, and so does the JetStream meta group, and Drain waits until other nodes lead them;
// a Shutdown that follows stalls nothing. Node.Leaders and Engine.Leaders say who leads what.
//
// # Embedded nodes
//
// StartNode runs a NATS server with JetStream inside the process, on 127.0.0.1 by default:
//
//	node, err := cluster.StartNode(cluster.NodeConfig{
//		Name: "n1", Dir: "/var/lib/app/n1",
//		Port: 4222, ClusterName: "app", ClusterPort: 6222,
//		Routes: []string{"nats://10.0.0.2:6222", "nats://10.0.0.3:6222"},
//	})
//	defer node.Shutdown()
//	nc, err := cluster.Connect([]string{node.ClientURL()})
//	defer nc.Close()
//	engine, err := cluster.New(ctx, nc, cluster.Config{})
//
// Three nodes (or five) make a cluster that keeps working while one (or two) is lost. With no
// ClusterName the node runs alone; use Config{Replicas: 1} with it.
//
// Nodes that start together may all call New at once: it makes each stream ready on its own
// (looked up, created only if missing, updated only if its settings differ), waits for a majority
// of the nodes within its context, and logs to Config.Logger what it waits for. A node
// of a cluster logs once when it loses the route to a peer, or its quorum, and once when they are
// back (the server's own lines that a lasting condition repeats, as a route that does not
// connect, are logged once per change of state too); Node.Quorum says whether it has a quorum
// (ErrNoQuorum, naming the nodes it does not reach).
//
// A client that gives no credentials (as Connect's) is an embedded node's application user, in
// JetStream's default account; the node also has a system user, whose password only the process
// knows, through which Drain asks the meta leader to step down.
//
// # An external JetStream cluster
//
// Connect to any of its servers' URLs and pass the connection to New:
//
//	nc, err := cluster.Connect([]string{"nats://js1:4222", "nats://js2:4222", "nats://js3:4222"},
//		nats.UserCredentials("app.creds"))
//	engine, err := cluster.New(ctx, nc, cluster.Config{Prefix: "app"})
//
// Its servers should run NATS 2.11 or later (the engine uses per-message TTLs and batched direct
// gets), sync every write (sync_interval: always in their jetstream block) and accept payloads of
// several MiB (max_payload), as embedded nodes do. The engine uses JetStream's default API prefix
// (no domain). Drain is for embedded nodes; an external server hands its leaderships over in
// lame duck mode (nats-server --signal ldm).
//
// Streams made by an earlier version get AllowRollup from New; the bucket of leases and the object
// store of blobs that it made are left as they are, and not read.
package cluster
