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

// notify is a Sink that passes the flush on and then reports it.
type notify struct {
	counter.Sink
	flushed chan []counter.Count
}

func (n notify) Write(ctx context.Context, link string, counts []counter.Count) error {
	if err := n.Sink.Write(ctx, link, counts); err != nil {
		return err
	}
	n.flushed <- counts
	return nil
}

// The alarm flushes the hits to the store as absolute counts per minute.
// (Here the flush comes after 10 ms rather than 30 s, and the three hits
// share one turn, so that the output does not depend on timing.)
func Example_flush() {
	dir, err := os.MkdirTemp("", "counter-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := counter.OpenStore(filepath.Join(dir, "analytics.sqlite"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	rt, err := core.Open(core.Options{Dir: filepath.Join(dir, "objects")})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	sink := notify{Sink: store, flushed: make(chan []counter.Count, 1)}
	counters, err := core.Register(rt, "counters", counter.Options{Sink: sink, FlushAfter: 10 * time.Millisecond}.New)
	if err != nil {
		log.Fatal(err)
	}
	stub, err := counters.Get("link-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = core.Do(ctx, stub, func(ctx context.Context, c *counter.Counter) error {
		for range 3 {
			if err := c.Record(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	var hits int64
	for _, c := range <-sink.flushed { // one bucket, or two if a minute began meanwhile
		hits += c.N
	}
	fmt.Println("hits flushed:", hits)
	total, err := store.Total(ctx, "link-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("store total:", total)
	// Output:
	// hits flushed: 3
	// store total: 3
}
