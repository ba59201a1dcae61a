package core

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry: the runtime's metrics and spans (OpenTelemetry, through the providers in Options; off
// when they are nil) and the hooks the rest of core calls. With both providers nil, rt.tel is nil
// and every hook returns at its first line: no allocation, no lock, no clock read.

// The attributes on every measurement and span.
const (
	attrNamespace = "durable.namespace"
	attrName      = "durable.name"
)

// telemetry holds the instruments and the tracer. Either half may be off.
type telemetry struct {
	tracer trace.Tracer // nil: no spans
	m      *instruments // nil: no metrics
}

type instruments struct {
	calls, overloaded, evictions                         metric.Int64Counter
	alarmsFired, alarmsRetried, alarmsDead               metric.Int64Counter
	wsIn, wsOut, wsSlow                                  metric.Int64Counter
	queueTime, gateWait, turnTime, commitTime, alarmLate metric.Float64Histogram
	commitTurns                                          metric.Int64Histogram
	queueLen, resident, openDBs, wsConns                 metric.Int64ObservableGauge
	rowsRead, rowsWritten                                metric.Int64ObservableCounter
	// Cluster mode's, for the whole runtime (no namespace attribute).
	shipped, records, recordBytes, pageBytes, snapshots metric.Int64ObservableCounter
	leasesHeld, leasesWatched                           metric.Int64ObservableGauge
	reg                                                 metric.Registration
}

// nsTel is a namespace's precomputed attribute options (nil when metrics are off).
type nsTel struct {
	set attribute.Set
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

// turnTel is what a turn measures, made only when telemetry is on. It wraps the turn's context
// (the turn itself has no field for it: a turn without telemetry stays as small as it was).
type turnTel struct {
	context.Context
	span, seg trace.Span // the call's span and the running segment's (nil without a tracer)
	queue     trace.Span // the wait for the gate's, until the turn holds it
	came      time.Time  // when the call came
	held      time.Time  // when it first held the gate
}

// telOf returns the turn's measurements; only called when telemetry is on.
func (t *turn) telOf() *turnTel {
	tt, _ := t.Context.(*turnTel)
	return tt
}

// Latency buckets, in seconds: 10 µs to 10 s.
var secondBuckets = []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

const scope = "github.com/durable-go/durable/core"

// newTelemetry builds the instruments from the providers in opts; nil when both are nil.
func newTelemetry(rt *Runtime, mp metric.MeterProvider, tp trace.TracerProvider) (*telemetry, error) {
	if mp == nil && tp == nil {
		return nil, nil
	}
	tel := &telemetry{}
	if tp != nil {
		tel.tracer = tp.Tracer(scope)
	}
	if mp == nil {
		return tel, nil
	}
	m, err := newInstruments(rt, mp.Meter(scope))
	if err != nil {
		return nil, err
	}
	tel.m = m
	return tel, nil
}

func newInstruments(rt *Runtime, mt metric.Meter) (*instruments, error) {
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
	m.overloaded = counter("durable.overloaded", "{call}", "Calls refused with ErrOverloaded: the object's queue was full.")
	m.evictions = counter("durable.evictions", "{object}", "Objects evicted from memory (idle, over MaxOpenObjects, or at shutdown).")
	m.alarmsFired = counter("durable.alarms.fired", "{run}", "Runs of due alarms and timers.")
	m.alarmsRetried = counter("durable.alarms.retried", "{run}", "Failed alarm and timer runs scheduled to run again.")
	m.alarmsDead = counter("durable.alarms.dead_lettered", "{alarm}", "Alarms and timers given up after their last retry (in the dead-letter table).")
	m.wsIn = counter("durable.websocket.messages.in", "{message}", "WebSocket messages received from clients.")
	m.wsOut = counter("durable.websocket.messages.out", "{message}", "WebSocket messages queued to clients (their turn committed).")
	m.wsSlow = counter("durable.websocket.slow_cuts", "{connection}", "WebSocket clients cut off with 1013 for falling behind their send queue.")
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
		rt.observe(m, o)
		return nil
	}, m.queueLen, m.resident, m.openDBs, m.wsConns, m.rowsRead, m.rowsWritten,
		m.shipped, m.records, m.recordBytes, m.pageBytes, m.snapshots, m.leasesHeld, m.leasesWatched)
	return m, err
}

// observe reports the gauges and the row counters, per namespace, and cluster mode's counters.
func (rt *Runtime) observe(m *instruments, o metric.Observer) {
	if rt.repl != nil {
		st := rt.clusterStats()
		o.ObserveInt64(m.shipped, st.Commits)
		o.ObserveInt64(m.records, st.Records)
		o.ObserveInt64(m.recordBytes, st.RecordBytes)
		o.ObserveInt64(m.pageBytes, st.PageBytes)
		o.ObserveInt64(m.snapshots, st.Snapshots)
		o.ObserveInt64(m.leasesHeld, st.HeldLeases)
		o.ObserveInt64(m.leasesWatched, st.WatchedLeases)
	}
	conns := rt.ws.counts()
	for _, ns := range rt.snapshotNamespaces() {
		opts := ns.tel.obs
		ns.mu.Lock()
		objs := make([]*object, 0, len(ns.objects))
		reads, writes, open := ns.goneReads, ns.goneWrites, 0
		for _, ob := range ns.objects {
			objs = append(objs, ob)
			reads += ob.reads.Load()
			writes += ob.writes.Load()
			if ob.hasStore.Load() {
				open++
			}
		}
		ns.mu.Unlock()
		qlen := 0
		for _, ob := range objs {
			ob.mu.Lock()
			qlen += ob.qlen
			ob.mu.Unlock()
		}
		o.ObserveInt64(m.resident, int64(len(objs)), opts...)
		o.ObserveInt64(m.openDBs, int64(open), opts...)
		o.ObserveInt64(m.queueLen, int64(qlen), opts...)
		o.ObserveInt64(m.rowsRead, reads, opts...)
		o.ObserveInt64(m.rowsWritten, writes, opts...)
		o.ObserveInt64(m.wsConns, int64(conns[ns]), opts...)
	}
}

// close stops the callbacks: the provider outlives the runtime.
func (tel *telemetry) close() {
	if tel != nil && tel.m != nil && tel.m.reg != nil {
		_ = tel.m.reg.Unregister()
	}
}

// namespaceTel precomputes a namespace's attribute options.
func (tel *telemetry) namespaceTel(name string) *nsTel {
	if tel == nil {
		return nil
	}
	set := attribute.NewSet(attribute.String(attrNamespace, name))
	opt := metric.WithAttributeSet(set)
	return &nsTel{set: set, add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}, obs: []metric.ObserveOption{opt}}
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

func (tel *telemetry) span(ctx context.Context, name string, o *object) (context.Context, trace.Span) {
	return tel.tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String(attrNamespace, o.ns.name), attribute.String(attrName, o.place.name)))
}

func endSpan(sp trace.Span, err error) {
	if sp == nil {
		return
	}
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// begin starts a turn's measurements and its span (a child of the span in the caller's context),
// and the span of its wait in the queue; the turn's context carries the call's span.
func (tel *telemetry) begin(t *turn) {
	if tel == nil {
		return
	}
	tt := &turnTel{Context: t.Context, came: time.Now()}
	t.Context = tt
	o := t.o
	if tel.tracer == nil {
		return
	}
	tt.Context, tt.span = tel.span(tt.Context, "durable.call", o)
	_, tt.queue = tel.tracer.Start(tt.Context, "durable.queue")
}

// held ends the queue wait: the turn holds the gate (or was refused, err). A call that found its
// object evicted is not counted: it is made again on the object's next instance.
func (tel *telemetry) held(t *turn, err error) {
	if tel == nil {
		return
	}
	tt := t.telOf()
	if !tt.held.IsZero() { // measured already (by the runner that ran it)
		return
	}
	tt.held = time.Now()
	queue := tt.queue
	tt.queue = nil
	if err == errEvicted { // not a failure: the call goes on, on the next instance
		endSpan(queue, nil)
		endSpan(tt.span, nil)
		return
	}
	if tel.m != nil {
		tel.m.calls.Add(t.Context, 1, t.o.ns.tel.add...)
		if err == nil {
			tel.m.queueTime.Record(t.Context, tt.held.Sub(tt.came).Seconds(), t.o.ns.tel.rec...)
		}
	}
	endSpan(queue, err)
	if err != nil {
		endSpan(tt.span, err)
	}
}

// commitWait starts the span of the turn's wait for its writes to be durable.
func (tel *telemetry) commitWait(t *turn) trace.Span {
	if tel == nil || tel.tracer == nil {
		return nil
	}
	_, sp := tel.tracer.Start(t.Context, "durable.commit")
	return sp
}

// done ends a turn that held the gate.
func (tel *telemetry) done(t *turn, commit trace.Span, err error) {
	if tel == nil {
		return
	}
	endSpan(commit, nil)
	if tel.m != nil {
		tel.m.turnTime.Record(t.Context, since(t.telOf().held), t.o.ns.tel.rec...)
	}
	endSpan(t.telOf().span, err)
}

// segmentStart starts the span of a turn's segment.
func (tel *telemetry) segmentStart(t *turn) {
	if tel == nil || tel.tracer == nil {
		return
	}
	_, t.telOf().seg = tel.tracer.Start(t.Context, "durable.segment")
}

// segmentEnd ends it (at the end of the code, or at an Await).
func (tel *telemetry) segmentEnd(t *turn, err error) {
	if tel == nil || t.telOf().seg == nil {
		return
	}
	endSpan(t.telOf().seg, err)
	t.telOf().seg = nil
}

// awaitStart ends the running segment at an Await and starts the span of the wait.
func (tel *telemetry) awaitStart(t *turn) trace.Span {
	if tel == nil {
		return nil
	}
	tel.segmentEnd(t, nil)
	if tel.tracer == nil {
		return nil
	}
	_, sp := tel.tracer.Start(t.Context, "durable.await")
	return sp
}

// awaitDone ends the wait's span and starts that of the wait for the gate.
func (tel *telemetry) awaitDone(t *turn, await trace.Span) (time.Time, trace.Span) {
	if tel == nil {
		return time.Time{}, nil
	}
	endSpan(await, nil)
	var sp trace.Span
	if tel.tracer != nil {
		_, sp = tel.tracer.Start(t.Context, "durable.gate")
	}
	return time.Now(), sp
}

// reentered: the turn holds the gate again after an Await; its next segment starts.
func (tel *telemetry) reentered(t *turn, from time.Time, gate trace.Span) {
	if tel == nil {
		return
	}
	if tel.m != nil {
		tel.m.gateWait.Record(t.Context, since(from), t.o.ns.tel.rec...)
	}
	endSpan(gate, nil)
	tel.segmentStart(t)
}

// commitStart reads the clock for a commit's latency.
func (tel *telemetry) commitStart() time.Time {
	if tel == nil || tel.m == nil {
		return time.Time{}
	}
	return time.Now()
}

// committed records a durable commit of turns.
func (tel *telemetry) committed(o *object, start time.Time, turns int) {
	if tel == nil || tel.m == nil {
		return
	}
	ctx := context.Background()
	tel.m.commitTime.Record(ctx, since(start), o.ns.tel.rec...)
	tel.m.commitTurns.Record(ctx, int64(turns), o.ns.tel.rec...)
}

// sent counts a WebSocket message that left its object.
func (tel *telemetry) sent(ns *namespace) {
	if tel == nil || tel.m == nil {
		return
	}
	tel.m.wsOut.Add(context.Background(), 1, ns.tel.add...)
}

// received counts a WebSocket message from a client.
func (tel *telemetry) received(ns *namespace) {
	if tel == nil || tel.m == nil {
		return
	}
	tel.m.wsIn.Add(context.Background(), 1, ns.tel.add...)
}

// eventSpan starts the span of an event the runtime delivers on its own (an alarm run, a WebSocket
// message); the turn's span is its child.
func (tel *telemetry) eventSpan(ctx context.Context, name string, ns *namespace, obj string) (context.Context, trace.Span) {
	if tel == nil || tel.tracer == nil {
		return ctx, nil
	}
	return tel.tracer.Start(ctx, name, trace.WithAttributes(attribute.String(attrNamespace, ns.name), attribute.String(attrName, obj)))
}

// alarmFired counts a due timer's run and how late it is, by the runtime's clock.
func (tel *telemetry) alarmFired(o *object, late time.Duration) {
	if tel == nil || tel.m == nil {
		return
	}
	ctx := context.Background()
	tel.m.alarmsFired.Add(ctx, 1, o.ns.tel.add...)
	tel.m.alarmLate.Record(ctx, max(late, 0).Seconds(), o.ns.tel.rec...)
}

func (tel *telemetry) count(c func(*instruments) metric.Int64Counter, ns *namespace) {
	if tel == nil || tel.m == nil {
		return
	}
	c(tel.m).Add(context.Background(), 1, ns.tel.add...)
}

// The runtime's own decisions: a record each (with the object's namespace and name) and a count.

// refused handles a call the gate refused: full queue or a deadlock.
func (o *object) refused(t *turn, err error) error {
	switch {
	case errors.Is(err, ErrOverloaded):
		o.rt.tel.count(func(m *instruments) metric.Int64Counter { return m.overloaded }, o.ns)
	case errors.Is(err, ErrDeadlock):
		o.rt.log.Warn("a call that could never run was refused", "event", "deadlock_refused",
			"namespace", o.ns.name, "name", o.place.name, "error", err)
	}
	return err
}

// logEviction records an eviction.
func (o *object) logEviction(reason string) {
	o.rt.tel.count(func(m *instruments) metric.Int64Counter { return m.evictions }, o.ns)
	o.rt.log.Debug("object evicted", "event", "evicted", "namespace", o.ns.name, "name", o.place.name, "reason", reason)
}

// alarmRetried records, once the retry is durable, that a failed run will run again.
func (o *object) alarmRetried(t *turn, row timerRow, at time.Time, cause error) {
	t.emit(effect{fn: func(committed bool) {
		if !committed {
			return
		}
		o.rt.tel.count(func(m *instruments) metric.Int64Counter { return m.alarmsRetried }, o.ns)
		o.rt.log.Warn("an alarm run failed; it runs again", "event", "alarm_retry", "namespace", o.ns.name, "name", o.place.name,
			"path", row.owner, "key", row.key, "retry", row.retry+1, "at", at, "error", cause)
	}})
}

// deadLettered counts an alarm given up (the record is OnAlarmDropped's).
func (o *object) deadLettered() {
	o.rt.tel.count(func(m *instruments) metric.Int64Counter { return m.alarmsDead }, o.ns)
}

// slowCut records a WebSocket client cut off for falling behind.
func (ws *WebSocket) slowCut() {
	ws.rt.tel.count(func(m *instruments) metric.Int64Counter { return m.wsSlow }, ws.ns)
	ws.rt.log.Warn("a slow WebSocket client was cut off (1013)", "event", "websocket_slow_cut",
		"namespace", ws.ns.name, "name", ws.name, "queue", ws.rt.opts.WebSocketSendQueue)
}

// damaged records an object database refused as damaged.
func (o *object) damaged(err error) {
	var de *DamagedError
	if errors.As(err, &de) {
		o.rt.log.Error("an object's database is damaged: the object refuses calls until restored", "event", "damaged",
			"namespace", o.ns.name, "name", o.place.name, "file", de.Path, "reason", de.Reason)
	}
}
