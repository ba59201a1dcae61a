package core

import (
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// The layers below the turn, and the seams through which the turn and the object's lifecycle call
// them. Only the turn's files (turn.go, batch.go, gate.go) and object.go call across a seam
// (seams_test.go holds them to it), so that what a layer is told is decided in one place. Each is
// nil when its layer is off.

// telemetryHooks is the telemetry seam: OpenTelemetry's instruments and spans
// (core/internal/telemetry), told plain values: a namespace's counts, an object's name, durations,
// errors, a turn's context to parent spans. The runtime holds one in Runtime.tel; nil (both
// providers in Options nil) is off, and then every hook returns at its first line: no allocation,
// no lock, no clock read. The runtime's counts (Runtime.counts, read by Stats and by the metrics)
// are kept beside it whether it is on or off.
type telemetryHooks = telemetry.Telemetry

// replicator is an object's side of cluster mode (package replica's Object), in object.repl; nil in
// the single-process runtime. Its methods are called by the gate holder, in this order over an
// object's life: Claim before a turn runs (Resume after each Await), Servable and Opened when
// the turn opens the database, Prepare before the batch's local COMMIT (then IndexAlarm, when the
// batch moved the object's earliest timer), DropFacets when the batch deleted the object's facets,
// Ship after it and before the output is released
// (then AlarmCommitted, with that timer), Committed after the output is released, Failed when the
// object fails, Release when it is evicted. The object answers its calls back as a replica.Host
// (object.go).
type replicator interface {
	Claim(h replica.Host) error
	Resume(h replica.Host) error
	Shard() int
	Servable() error
	Opened(fresh bool) error
	Prepare(st *store, dirty bool) error
	DropFacets(dir string)
	Ship(st *store, dirty bool) error
	Committed(st *store) error
	IndexAlarm(at int64) error
	AlarmCommitted(at int64)
	Failed(h replica.Host, cause error)
	Release() error
}

var _ replicator = (*replica.Object)(nil)
