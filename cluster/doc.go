// Package cluster keeps the replicated log and the leases of the runtime's cluster mode
// (core.Replication) in NATS JetStream, embedded in the process or external.
//
// # The engine
//
// An Engine fills replog.Log and replog.Leases:
//
//   - The log is spread over a fixed number of streams (Config.Shards), each key's records on its
//     own subject. Append publishes with the expected last sequence of the key's subject, so that
//     among racing writers exactly one wins; a refusal is replog.ErrConflict once a read
//     through the quorum shows another record after the one expected, and an acknowledgement
//     lost to a timeout or a dropped connection is replog.ErrUnknown (the record is sent again
//     only after a refusal that stored nothing).
//   - Last and Leases.Get are linearizable: they write a small barrier through the stream's
//     quorum, then read the last record as of the barrier from a replica that has it, so that a
//     leader cut off from the others never answers with a stale record.
//   - Read brings a key's records in batches (512 per round trip) from any replica, up to the
//     last record there was when it began; Trim purges a key's subject before a sequence.
//   - Blobs (snapshots) go to an object store bucket in chunks, so they may be far larger than a
//     message; leases to a key-value bucket, whose revisions are stream sequences and never
//     repeat.
//
// Every stream and bucket has Config.Replicas replicas (default 3), and every node started by
// StartNode syncs every write to disk before it acknowledges it (JetStream's "sync_interval:
// always"; its default, a sync every two minutes, can lose acknowledged writes when machines
// fail together).
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
// Nodes that start together may all call New at once: it makes each stream and bucket ready on
// its own (looked up, created only if missing, updated only if its settings differ), waits for a
// majority of the nodes within its context, and logs to Config.Logger what it waits for. A node
// of a cluster logs once when it loses the route to a peer, or its quorum, and once when they are
// back (the server's own lines that a lasting condition repeats, as a route that does not
// connect, are logged once per change of state too); Node.Quorum says whether it has a quorum
// (ErrNoQuorum, naming the nodes it does not reach).
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
// (no domain).
package cluster
