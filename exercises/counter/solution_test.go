//go:build exercises && solution

package counter_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
)

// The tests' target with -tags solution: the reference solution.

type (
	Counter = counter.Counter
	Count   = counter.Count
)

func newCounter(sink counter.Sink, flushAfter time.Duration) func(context.Context, *core.State) (*Counter, error) {
	return counter.Options{Sink: sink, FlushAfter: flushAfter, Logger: slog.New(slog.DiscardHandler)}.New
}
