// Package telemetry measures the runtime of package core: it keeps the runtime's counts, which
// Runtime.Stats reads whether telemetry is on or off, and feeds OpenTelemetry's instruments and
// spans, through the providers in core's Options, when they are set. It is told plain values (a
// namespace's counts, an object's name, durations, errors, counts, a context to parent spans) and
// knows nothing of core's types; only core's turn and object lifecycle call it.
//
// With both providers nil, a *Telemetry is nil and every hook returns at its first line: no
// allocation, no lock, no clock read. The hooks a turn calls are that check and a call to their
// body, so that they inline where the turn calls them.
//
// # Metrics
//
// Per namespace (attribute durable.namespace): durable.calls, durable.queue.length,
// durable.queue.time, durable.gate.wait, durable.turn.duration, durable.commit.latency,
// durable.commit.turns, durable.rows.read and .written, durable.overloaded, durable.alarms.fired,
// .retried, .dead_lettered and .lateness, durable.objects.resident, durable.databases.open,
// durable.evictions, durable.websocket.connections, .messages.in, .messages.out and .slow_cuts;
// times in seconds. In cluster mode, for the whole runtime, durable.cluster.commits, .records,
// .record_bytes, .page_bytes, .snapshots, .leases.held and .leases.watched. Prometheus's exporter
// names them with underscores, counters ending in _total (durable_calls_total,
// durable_cluster_commits_total) and times in _seconds.
//
// # Spans
//
// A turn is a durable.call span, a child of the span in the caller's context, with durable.queue, a
// durable.segment per segment, durable.await and durable.gate around each Await, and durable.commit
// under it; alarm runs (durable.alarm) and WebSocket deliveries (durable.websocket.message, .close)
// are spans around their turns. Every span carries durable.namespace and durable.name.
package telemetry
