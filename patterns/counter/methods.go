package counter

import (
	"context"

	"github.com/durable-go/durable/core"
)

// Methods are a counter's operations as methods callable on any node of a cluster (core.Define):
// called at a node that does not own the counter's object, each runs at the node that does, where
// its flush alarm runs too; in one process, or at the owner, it runs in place as core.Call does.
type Methods struct {
	Record func(ctx context.Context, c *core.Stub[*Counter], _ struct{}) (struct{}, error)
	Total  func(ctx context.Context, c *core.Stub[*Counter], _ struct{}) (int64, error)
}

// Define defines a counter's methods on counters, once per namespace, on every node alike.
func Define(counters *core.Namespace[*Counter]) (*Methods, error) {
	var m Methods
	var err error
	if m.Record, err = core.Define(counters, "record", func(ctx context.Context, c *Counter, _ struct{}) (struct{}, error) {
		return struct{}{}, c.Record(ctx)
	}); err != nil {
		return nil, err
	}
	if m.Total, err = core.Define(counters, "total", func(ctx context.Context, c *Counter, _ struct{}) (int64, error) {
		return c.Total(ctx)
	}); err != nil {
		return nil, err
	}
	return &m, nil
}
