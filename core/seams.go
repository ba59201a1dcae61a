package core

import "github.com/durable-go/durable/core/internal/telemetry"

// The layers below the turn, and the seams through which the turn and the object's lifecycle call
// them. Only turn.go and object.go call across a seam (seams_test.go holds them to it), so that what
// a layer is told is decided in one place.

// telemetryHooks is the telemetry seam: OpenTelemetry's instruments and spans
// (core/internal/telemetry), told plain values: a namespace's counts, an object's name, durations,
// errors, a turn's context to parent spans. The runtime holds one in Runtime.tel; nil (both
// providers in Options nil) is off, and then every hook returns at its first line: no allocation,
// no lock, no clock read. The runtime's counts (Runtime.counts, read by Stats and by the metrics)
// are kept beside it whether it is on or off.
type telemetryHooks = telemetry.Telemetry
