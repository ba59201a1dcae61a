package bench

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/durable-go/durable/core"
)

// telemetryModes are the telemetry settings BenchmarkForward and
// BenchmarkWrite compare: none, metrics only, metrics and traces.
var telemetryModes = []string{"off", "metrics", "on"}

// withTelemetry returns opts with a meter if mode is "metrics", and a meter
// and a tracer if it is "on": the meter's reader is never collected (the
// cost is the measurements'), the tracer samples every span and exports
// them, in batches, to nowhere. Both are shut down when the benchmark ends.
func withTelemetry(b *testing.B, mode string, opts core.Options) core.Options {
	b.Helper()
	if mode == "off" {
		return opts
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() {
		ctx := context.Background()
		if err := tp.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		if err := mp.Shutdown(ctx); err != nil {
			b.Error(err)
		}
	})
	opts.Meter = mp
	if mode == "on" {
		opts.Tracer = tp
	}
	return opts
}
