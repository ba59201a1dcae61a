package counter_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
)

// Record counts a hit. The first hit arms the flush 30 s out; the others
// find it pending and leave it alone (the debounce).
func ExampleCounter_Record() {
	dir, err := os.MkdirTemp("", "counter-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := counter.OpenStore(filepath.Join(dir, "analytics.sqlite"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the runtime: deferred calls run last first
	rt, err := core.Open(core.Options{Dir: filepath.Join(dir, "objects")})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	counters, err := core.Register(rt, "counters", counter.Options{Sink: store}.New)
	if err != nil {
		log.Fatal(err)
	}
	stub, err := counters.Get("link-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var due []time.Time
	for range 5 {
		at, err := core.Call(ctx, stub, func(ctx context.Context, c *counter.Counter) (time.Time, error) {
			if err := c.Record(ctx); err != nil {
				return time.Time{}, err
			}
			at, _, err := c.FlushAt(ctx)
			return at, err
		})
		if err != nil {
			log.Fatal(err)
		}
		due = append(due, at)
	}
	total, err := core.Call(ctx, stub, func(ctx context.Context, c *counter.Counter) (int64, error) {
		return c.Total(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("hits:", total)
	fmt.Println("one flush for all:", due[0].Equal(due[4]))
	fmt.Println("flush due in about:", time.Until(due[0]).Round(10*time.Second))
	// Output:
	// hits: 5
	// one flush for all: true
	// flush due in about: 30s
}
