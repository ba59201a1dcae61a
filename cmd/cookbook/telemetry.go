package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsEndpoint is the server's /metrics: the runtime's OpenTelemetry
// metrics (core.Options.Meter), read by OpenTelemetry's Prometheus
// exporter into a registry of the server's own (not Prometheus's global
// one) and served in Prometheus's text format.
type metricsEndpoint struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

func newMetricsEndpoint() (*metricsEndpoint, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &metricsEndpoint{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// Close stops the provider.
func (m *metricsEndpoint) Close() error { return m.provider.Shutdown(context.Background()) }

// summaryFamilies are the numbers the tour prints from /metrics.
var summaryFamilies = []string{
	"durable_calls_total",
	"durable_commit_latency_seconds_count",
	"durable_rows_written_total",
	"durable_alarms_fired_total",
	"durable_alarms_retried_total",
	"durable_alarms_dead_lettered_total",
	"durable_evictions_total",
	"durable_websocket_messages_in_total",
	"durable_websocket_messages_out_total",
}

// summary scrapes /metrics as a client would and writes, for each family
// of summaryFamilies, its total and its value per namespace.
func (m *metricsEndpoint) summary(w io.Writer) error {
	rec := httptest.NewRecorder()
	m.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("metrics: GET /metrics: %d %s", rec.Code, rec.Body.String())
	}
	values := map[string]map[string]float64{} // family -> namespace -> value
	for line := range strings.Lines(rec.Body.String()) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), "{")
		if !ok || !slices.Contains(summaryFamilies, name) {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			return fmt.Errorf("metrics: %q: %w", line, err)
		}
		ns := "?"
		if _, after, ok := strings.Cut(labels, `durable_namespace="`); ok {
			ns, _, _ = strings.Cut(after, `"`)
		}
		if values[name] == nil {
			values[name] = map[string]float64{}
		}
		values[name][ns] += v
	}
	for _, f := range summaryFamilies {
		var total float64
		var parts []string
		for _, ns := range slices.Sorted(maps.Keys(values[f])) {
			total += values[f][ns]
			parts = append(parts, fmt.Sprintf("%s=%g", ns, values[f][ns]))
		}
		fmt.Fprintf(w, "  %-38s %6g  %s\n", f, total, strings.Join(parts, " "))
	}
	return nil
}
