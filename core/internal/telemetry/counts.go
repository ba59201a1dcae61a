package telemetry

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Counts are the runtime's counters, kept whether telemetry is on or off: Runtime.Stats reads the
// totals, and the metrics read each namespace's share. Each event is counted once, here. The zero
// value is ready to use; a Counts is safe for concurrent use.
type Counts struct {
	turns, commits, constructs, evictions, resident, openDBs atomic.Int64
}

// Totals are the counts over the whole runtime.
type Totals struct {
	Turns, Commits, Constructs, Evictions, Resident, OpenDBs int64
}

// Turn counts a turn's segment of code run (a call, a constructor, an event delivery).
func (c *Counts) Turn() { c.turns.Add(1) }

// Construct counts a constructor run.
func (c *Counts) Construct() { c.constructs.Add(1) }

// Commit counts a durable commit of an object's database.
func (c *Counts) Commit() { c.commits.Add(1) }

// Evicted counts an object of ns evicted from memory.
func (c *Counts) Evicted(ns *Namespace) {
	c.evictions.Add(1)
	ns.evictions.Add(1)
}

// Activated counts an object of ns come into memory and returns how many are resident now.
func (c *Counts) Activated(ns *Namespace) int64 {
	ns.resident.Add(1)
	return c.resident.Add(1)
}

// Deactivated counts an object of ns gone from memory.
func (c *Counts) Deactivated(ns *Namespace) {
	ns.resident.Add(-1)
	c.resident.Add(-1)
}

// Opened counts a database of ns opened.
func (c *Counts) Opened(ns *Namespace) {
	ns.openDBs.Add(1)
	c.openDBs.Add(1)
}

// Closed counts a database of ns closed (or no longer counted as open: its object was evicted).
func (c *Counts) Closed(ns *Namespace) {
	ns.openDBs.Add(-1)
	c.openDBs.Add(-1)
}

// Resident is the number of objects in memory now.
func (c *Counts) Resident() int64 { return c.resident.Load() }

// OpenDBs is the number of object databases open now.
func (c *Counts) OpenDBs() int64 { return c.openDBs.Load() }

// Totals reads the counts.
func (c *Counts) Totals() Totals {
	return Totals{Turns: c.turns.Load(), Commits: c.commits.Load(), Constructs: c.constructs.Load(),
		Evictions: c.evictions.Load(), Resident: c.resident.Load(), OpenDBs: c.openDBs.Load()}
}

// Namespace is one namespace's share of the counts and its measurements' attributes. Make one with
// Telemetry.Namespace (with telemetry off too). The zero Namespace is counted but not measured (a
// namespace the runtime holds only for a moment, not registered).
type Namespace struct {
	name                         string
	resident, openDBs, evictions atomic.Int64
	attrs                        *attrs // nil: metrics are off
}

// attrs are a namespace's precomputed attribute options.
type attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

// Namespace makes the counts and the attributes of the namespace called name; t may be nil.
func (t *Telemetry) Namespace(name string) *Namespace {
	ns := &Namespace{name: name}
	if t == nil || t.m == nil {
		return ns
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attribute.String(attrNamespace, name)))
	ns.attrs = &attrs{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}, obs: []metric.ObserveOption{opt}}
	return ns
}
