package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// The attributes on every measurement and span.
const (
	attrNamespace = "durable.namespace"
	attrName      = "durable.name"
)

// scope names the instruments' and the tracer's source.
const scope = "github.com/durable-go/durable/core"

// Latency buckets, in seconds: 10 µs to 10 s.
var secondBuckets = []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Telemetry holds the instruments and the tracer; either half may be off, and a nil *Telemetry is
// all off. Its methods are the hooks; each returns at its first line when what it feeds is off.
type Telemetry struct {
	tracer trace.Tracer // nil: no spans
	m      *instruments // nil: no metrics
}

type instruments struct {
	calls                                                metric.Int64Counter
	counted                                              [numEvents]metric.Int64Counter
	alarmsFired                                          metric.Int64Counter
	queueTime, gateWait, turnTime, commitTime, alarmLate metric.Float64Histogram
	commitTurns                                          metric.Int64Histogram
	queueLen, resident, openDBs, wsConns                 metric.Int64ObservableGauge
	rowsRead, rowsWritten, evictions                     metric.Int64ObservableCounter
	// Cluster mode's, for the whole runtime (no namespace attribute).
	shipped, records, recordBytes, pageBytes, snapshots metric.Int64ObservableCounter
	leasesHeld, leasesWatched                           metric.Int64ObservableGauge
	reg                                                 metric.Registration
}

// Event is one of the runtime's events that the metrics only count.
type Event int

// The events counted.
const (
	Overloaded        Event = iota // a call refused with ErrOverloaded
	AlarmRetried                   // a failed alarm or timer run scheduled to run again
	AlarmDeadLettered              // an alarm or timer given up after its last retry
	MessageIn                      // a WebSocket message received from a client
	MessageOut                     // a WebSocket message queued to a client
	SlowCut                        // a WebSocket client cut off for falling behind
	numEvents
)

// Sample is what the runtime reports of one namespace at a collection, beside its counts.
type Sample struct {
	Queued      int64 // calls waiting for an object's gate now
	RowsRead    int64 // rows returned to objects' code, over the runtime's life
	RowsWritten int64 // rows changed by objects, over the runtime's life
	Conns       int64 // WebSocket connections open now
}

// Cluster is what cluster mode reports at a collection, for the whole runtime.
type Cluster struct {
	Commits, Records, RecordBytes, PageBytes, Snapshots int64 // over the runtime's life
	HeldLeases, WatchedLeases                           int64 // now
}

// Source is how the observable instruments read the runtime at a collection.
type Source struct {
	// Namespaces calls yield for each namespace with its sample.
	Namespaces func(yield func(*Namespace, Sample))
	// Cluster reports cluster mode's counts; ok is false in one process.
	Cluster func() (c Cluster, ok bool)
}

// New builds the instruments from the providers; it returns nil when both are nil. The observable
// instruments read src at each collection, until Close.
func New(mp metric.MeterProvider, tp trace.TracerProvider, src Source) (*Telemetry, error) {
	if mp == nil && tp == nil {
		return nil, nil
	}
	t := &Telemetry{}
	if tp != nil {
		t.tracer = tp.Tracer(scope)
	}
	if mp == nil {
		return t, nil
	}
	m, err := newInstruments(mp.Meter(scope), src)
	if err != nil {
		return nil, err
	}
	t.m = m
	return t, nil
}

func newInstruments(mt metric.Meter, src Source) (*instruments, error) {
	m := &instruments{}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := mt.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(secondBuckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := mt.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	total := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := mt.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.calls = counter("durable.calls", "{call}", "Turns asked for: calls, alarm runs and WebSocket deliveries, refused ones included.")
	m.counted[Overloaded] = counter("durable.overloaded", "{call}", "Calls refused with ErrOverloaded: the object's queue was full.")
	m.evictions = total("durable.evictions", "{object}", "Objects evicted from memory (idle, over MaxOpenObjects, or at shutdown).")
	m.alarmsFired = counter("durable.alarms.fired", "{run}", "Runs of due alarms and timers.")
	m.counted[AlarmRetried] = counter("durable.alarms.retried", "{run}", "Failed alarm and timer runs scheduled to run again.")
	m.counted[AlarmDeadLettered] = counter("durable.alarms.dead_lettered", "{alarm}", "Alarms and timers given up after their last retry (in the dead-letter table).")
	m.counted[MessageIn] = counter("durable.websocket.messages.in", "{message}", "WebSocket messages received from clients.")
	m.counted[MessageOut] = counter("durable.websocket.messages.out", "{message}", "WebSocket messages queued to clients (their turn committed).")
	m.counted[SlowCut] = counter("durable.websocket.slow_cuts", "{connection}", "WebSocket clients cut off with 1013 for falling behind their send queue.")
	m.queueTime = seconds("durable.queue.time", "Time a call waited in the object's queue for the gate.")
	m.gateWait = seconds("durable.gate.wait", "Time a turn waited to hold the gate again after an Await (or a call out).")
	m.turnTime = seconds("durable.turn.duration", "Time from holding the gate to the turn's writes being durable.")
	m.commitTime = seconds("durable.commit.latency", "Time of one group commit of an object's database.")
	m.alarmLate = seconds("durable.alarms.lateness", "How late a due alarm or timer ran, by the runtime's clock.")
	ct, err := mt.Int64Histogram("durable.commit.turns", metric.WithUnit("{turn}"), metric.WithDescription("Turns sharing one group commit."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
	errs = append(errs, err)
	m.commitTurns = ct
	m.queueLen = gauge("durable.queue.length", "{call}", "Calls waiting for an object's gate now.")
	m.resident = gauge("durable.objects.resident", "{object}", "Objects in memory now.")
	m.openDBs = gauge("durable.databases.open", "{database}", "Object databases open now.")
	m.wsConns = gauge("durable.websocket.connections", "{connection}", "WebSocket connections open now.")
	m.rowsRead = total("durable.rows.read", "{row}", "Rows returned to objects' code by queries and KV reads.")
	m.rowsWritten = total("durable.rows.written", "{row}", "Rows changed by objects' statements, KV writes and alarm changes.")
	m.shipped = total("durable.cluster.commits", "{commit}", "Commits shipped to the cluster's log (cluster mode).")
	m.records = total("durable.cluster.records", "{record}", "Records appended for them (a commit over 1 MiB takes several).")
	m.recordBytes = total("durable.cluster.record_bytes", "By", "Bytes of those records, as appended.")
	m.pageBytes = total("durable.cluster.page_bytes", "By", "Bytes of the page images they carried, before compression.")
	m.snapshots = total("durable.cluster.snapshots", "{snapshot}", "Snapshots of object databases written to the cluster.")
	m.leasesHeld = gauge("durable.cluster.leases.held", "{lease}", "Leases this node holds now: its resident objects in cluster mode.")
	m.leasesWatched = gauge("durable.cluster.leases.watched", "{lease}", "Other nodes' leases this node is timing for a takeover now.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.reg, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.observe(src, o)
		return nil
	}, m.queueLen, m.resident, m.openDBs, m.wsConns, m.rowsRead, m.rowsWritten, m.evictions,
		m.shipped, m.records, m.recordBytes, m.pageBytes, m.snapshots, m.leasesHeld, m.leasesWatched)
	return m, err
}

// observe reports the gauges and the observable counters, per namespace, and cluster mode's.
func (m *instruments) observe(src Source, o metric.Observer) {
	if src.Cluster != nil {
		if c, ok := src.Cluster(); ok {
			o.ObserveInt64(m.shipped, c.Commits)
			o.ObserveInt64(m.records, c.Records)
			o.ObserveInt64(m.recordBytes, c.RecordBytes)
			o.ObserveInt64(m.pageBytes, c.PageBytes)
			o.ObserveInt64(m.snapshots, c.Snapshots)
			o.ObserveInt64(m.leasesHeld, c.HeldLeases)
			o.ObserveInt64(m.leasesWatched, c.WatchedLeases)
		}
	}
	if src.Namespaces == nil {
		return
	}
	src.Namespaces(func(ns *Namespace, s Sample) {
		if ns.attrs == nil {
			return
		}
		opts := ns.attrs.obs
		o.ObserveInt64(m.resident, ns.resident.Load(), opts...)
		o.ObserveInt64(m.openDBs, ns.openDBs.Load(), opts...)
		o.ObserveInt64(m.evictions, ns.evictions.Load(), opts...)
		o.ObserveInt64(m.queueLen, s.Queued, opts...)
		o.ObserveInt64(m.rowsRead, s.RowsRead, opts...)
		o.ObserveInt64(m.rowsWritten, s.RowsWritten, opts...)
		o.ObserveInt64(m.wsConns, s.Conns, opts...)
	})
}

// Close stops the callbacks: the provider outlives the runtime.
func (t *Telemetry) Close() {
	if t != nil && t.m != nil && t.m.reg != nil {
		_ = t.m.reg.Unregister()
	}
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

// End ends sp (nil: none) with err's status.
func End(sp trace.Span, err error) {
	if sp == nil {
		return
	}
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// Count counts an event of namespace ns.
func (t *Telemetry) Count(ns *Namespace, e Event) {
	if t == nil || t.m == nil || ns.attrs == nil {
		return
	}
	t.m.counted[e].Add(context.Background(), 1, ns.attrs.add...)
}

// AlarmFired counts a due timer's run of namespace ns and how late it is, by the runtime's clock.
func (t *Telemetry) AlarmFired(ns *Namespace, late time.Duration) {
	if t == nil || t.m == nil || ns.attrs == nil {
		return
	}
	ctx := context.Background()
	t.m.alarmsFired.Add(ctx, 1, ns.attrs.add...)
	t.m.alarmLate.Record(ctx, max(late, 0).Seconds(), ns.attrs.rec...)
}

// EventSpan starts the span of an event the runtime delivers on its own to the object obj of ns
// (an alarm run, a WebSocket message); the turn's span is its child. End ends it.
func (t *Telemetry) EventSpan(ctx context.Context, name string, ns *Namespace, obj string) (context.Context, trace.Span) {
	if t == nil || t.tracer == nil {
		return ctx, nil
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attribute.String(attrNamespace, ns.name), attribute.String(attrName, obj)))
}

// CommitStart reads the clock for a commit's latency.
func (t *Telemetry) CommitStart() time.Time {
	if t == nil || t.m == nil {
		return time.Time{}
	}
	return time.Now()
}

// Committed records a durable commit of turns of an object of ns, started at start.
func (t *Telemetry) Committed(ns *Namespace, start time.Time, turns int) {
	if t == nil || t.m == nil || ns.attrs == nil {
		return
	}
	ctx := context.Background()
	t.m.commitTime.Record(ctx, since(start), ns.attrs.rec...)
	t.m.commitTurns.Record(ctx, int64(turns), ns.attrs.rec...)
}
