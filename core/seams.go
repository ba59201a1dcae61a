package core

import "github.com/durable-go/durable/core/internal/replica"

// The seams: the layers below the turn that the turn (turn.go) and the object's lifecycle
// (object.go) call, and no other file. Each is nil when its layer is off.

// replicator is an object's side of cluster mode (package replica's Object); nil in the
// single-process runtime. Its methods are called by the gate holder, in this order over an
// object's life: Claim before a turn runs (and again after each Await), Servable and Opened when
// the turn opens the database, Prepare before the batch's local COMMIT, Ship after it and before
// the output is released, Committed after the output is released, Failed when the object fails,
// Release when it is evicted.
type replicator interface {
	Claim(h replica.Host) error
	Servable() error
	Opened(fresh bool) error
	Prepare(st *store, dirty bool) error
	Ship(st *store, dirty bool) error
	Committed(st *store) error
	Failed(h replica.Host, cause error)
	Release() error
}

var _ replicator = (*replica.Object)(nil)
