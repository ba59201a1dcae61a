package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Turn is what a turn measures, made only when telemetry is on. It wraps the turn's context (the
// turn itself has no field for it: a turn without telemetry stays as small as it was); the hooks
// below take that context and find it there.
type Turn struct {
	context.Context
	ns        *Namespace
	span, seg trace.Span // the call's span and the running segment's (nil without a tracer)
	queue     trace.Span // the wait for the gate's, until the turn holds it
	came      time.Time  // when the call came
	held      time.Time  // when it first held the gate
}

// turnOf returns the turn's measurements; only called when telemetry is on.
func turnOf(ctx context.Context) *Turn {
	tt, _ := ctx.(*Turn)
	return tt
}

// Begin starts the measurements of a turn of the object obj of ns, whose context is ctx, and its
// span (a child of the span in ctx) and the span of its wait in the queue. It returns the turn's
// context from now on: ctx itself when telemetry is off.
func (t *Telemetry) Begin(ctx context.Context, ns *Namespace, obj string) context.Context {
	if t == nil {
		return ctx
	}
	return t.begin(ctx, ns, obj)
}

func (t *Telemetry) begin(ctx context.Context, ns *Namespace, obj string) context.Context {
	tt := &Turn{Context: ctx, ns: ns, came: time.Now()}
	if t.tracer == nil {
		return tt
	}
	tt.Context, tt.span = t.tracer.Start(tt.Context, "durable.call", trace.WithAttributes(
		attribute.String(attrNamespace, ns.name), attribute.String(attrName, obj)))
	_, tt.queue = t.tracer.Start(tt.Context, "durable.queue")
	return tt
}

// Held ends the queue wait of the turn whose context is ctx: it holds the gate, or was refused
// (err). A call that found its object evicted (again) is not counted: it is made again on the
// object's next instance.
func (t *Telemetry) Held(ctx context.Context, err error, again bool) {
	if t != nil {
		t.held(ctx, err, again)
	}
}

func (t *Telemetry) held(ctx context.Context, err error, again bool) {
	tt := turnOf(ctx)
	if !tt.held.IsZero() { // measured already (by the runner that ran it)
		return
	}
	tt.held = time.Now()
	queue := tt.queue
	tt.queue = nil
	if again { // not a failure: the call goes on, on the next instance
		End(queue, nil)
		End(tt.span, nil)
		return
	}
	if t.m != nil && tt.ns.attrs != nil {
		t.m.calls.Add(tt, 1, tt.ns.attrs.add...)
		if err == nil {
			t.m.queueTime.Record(tt, tt.held.Sub(tt.came).Seconds(), tt.ns.attrs.rec...)
		}
	}
	End(queue, err)
	if err != nil {
		End(tt.span, err)
	}
}

// CommitWait starts the span of the turn's wait for its writes to be durable.
func (t *Telemetry) CommitWait(ctx context.Context) trace.Span {
	if t == nil || t.tracer == nil {
		return nil
	}
	return t.commitWait(ctx)
}

//go:noinline (CommitWait inlines where it is called: as a nil check, with telemetry off)
func (t *Telemetry) commitWait(ctx context.Context) trace.Span {
	_, sp := t.tracer.Start(ctx, "durable.commit")
	return sp
}

// Done ends a turn that held the gate, and commit, its CommitWait (nil: none).
func (t *Telemetry) Done(ctx context.Context, commit trace.Span, err error) {
	if t != nil {
		t.done(ctx, commit, err)
	}
}

func (t *Telemetry) done(ctx context.Context, commit trace.Span, err error) {
	tt := turnOf(ctx)
	End(commit, nil)
	if t.m != nil && tt.ns.attrs != nil {
		t.m.turnTime.Record(tt, since(tt.held), tt.ns.attrs.rec...)
	}
	End(tt.span, err)
}

// SegmentStart starts the span of a turn's segment.
func (t *Telemetry) SegmentStart(ctx context.Context) {
	if t != nil && t.tracer != nil {
		t.segmentStart(ctx)
	}
}

func (t *Telemetry) segmentStart(ctx context.Context) {
	tt := turnOf(ctx)
	_, tt.seg = t.tracer.Start(tt, "durable.segment")
}

// SegmentEnd ends it (at the end of the code, or at an Await).
func (t *Telemetry) SegmentEnd(ctx context.Context, err error) {
	if t != nil {
		t.segmentEnd(ctx, err)
	}
}

func (t *Telemetry) segmentEnd(ctx context.Context, err error) {
	tt := turnOf(ctx)
	if tt.seg == nil {
		return
	}
	End(tt.seg, err)
	tt.seg = nil
}

// AwaitStart ends the running segment at an Await and starts the span of the wait.
func (t *Telemetry) AwaitStart(ctx context.Context) trace.Span {
	if t == nil {
		return nil
	}
	t.SegmentEnd(ctx, nil)
	if t.tracer == nil {
		return nil
	}
	_, sp := t.tracer.Start(ctx, "durable.await")
	return sp
}

// AwaitDone ends the wait's span and starts that of the wait for the gate.
func (t *Telemetry) AwaitDone(ctx context.Context, await trace.Span) (time.Time, trace.Span) {
	if t == nil {
		return time.Time{}, nil
	}
	End(await, nil)
	var sp trace.Span
	if t.tracer != nil {
		_, sp = t.tracer.Start(ctx, "durable.gate")
	}
	return time.Now(), sp
}

// Reentered: the turn holds the gate again after an Await, waited for since from; its next
// segment starts.
func (t *Telemetry) Reentered(ctx context.Context, from time.Time, gate trace.Span) {
	if t == nil {
		return
	}
	if ns := turnOf(ctx).ns; t.m != nil && ns.attrs != nil {
		t.m.gateWait.Record(ctx, since(from), ns.attrs.rec...)
	}
	End(gate, nil)
	t.SegmentStart(ctx)
}
