// Package replica is cluster mode's side of the runtime: the leases a node holds (renewed by one
// goroutine, owned by the Node), and for each resident object an Object that claims it for a turn
// (lease taken or proven, local file brought to the log's head, epoch record appended), writes its
// position before a commit, ships the commit's pages to its log after it, snapshots and trims the
// log, and discards the local file when a commit fails.
//
// The runtime calls an Object only from the object's turn and lifecycle, holding the object's gate;
// the Object calls back into the runtime's object through Host for the object's database. It
// knows nothing else of the runtime. The engine under it is any replog.Log and replog.Leases.
package replica
