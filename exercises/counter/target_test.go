//go:build exercises && !solution

package counter_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
	ex "github.com/durable-go/durable/exercises/counter"
)

// The tests' target: your answer. With -tags solution they run against
// patterns/counter instead (solution_test.go).

type (
	Counter = ex.Counter
	Count   = ex.Count
)

func newCounter(sink ex.Sink, flushAfter time.Duration) func(context.Context, *core.State) (*Counter, error) {
	return ex.Options{Sink: sink, FlushAfter: flushAfter, Logger: slog.New(slog.DiscardHandler)}.New
}
