package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/durable-go/durable/core"
)

// tally is the example's object: it counts in storage.
type tally struct{ st *core.State }

func add(ctx context.Context, t *tally) error {
	n, _, err := core.GetJSON[int](ctx, t.st.Storage(), "n")
	if err != nil {
		return err
	}
	return core.PutJSON(ctx, t.st.Storage(), "n", n+1)
}

// The runtime measures into the providers it is given: here an in-memory reader and span recorder,
// in a server an exporter (the workshop server's /metrics uses OpenTelemetry's Prometheus one).
func Example_telemetry() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	rt, err := core.Open(core.Options{
		Meter:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	ns, err := core.Register(rt, "tallies", func(_ context.Context, st *core.State) (*tally, error) { return &tally{st: st}, nil })
	if err != nil {
		panic(err)
	}
	stub, err := ns.Get("visits")
	if err != nil {
		panic(err)
	}
	for range 3 {
		if err := core.Do(context.Background(), stub, add); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if m.Name == "durable.calls" || m.Name == "durable.rows.written" {
				ns, _ := d.DataPoints[0].Attributes.Value("durable.namespace")
				fmt.Printf("%s{namespace=%s} %d\n", m.Name, ns.AsString(), d.DataPoints[0].Value)
			}
		case metricdata.Histogram[int64]:
			if m.Name == "durable.commit.turns" {
				fmt.Printf("%s: %d commits\n", m.Name, d.DataPoints[0].Count)
			}
		}
	}
	calls := 0
	for _, s := range spans.Ended() {
		if s.Name() == "durable.call" {
			calls++
		}
	}
	fmt.Println("durable.call spans:", calls)
	// Unordered output:
	// durable.calls{namespace=tallies} 3
	// durable.rows.written{namespace=tallies} 3
	// durable.commit.turns: 3 commits
	// durable.call spans: 3
}
