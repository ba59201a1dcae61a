package limiter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
)

// Window 60 s, limit 5: of 7 calls the first 5 pass and the last 2 are
// refused. A minute after the first call, one more passes.
func ExampleLimiter_AllowAt() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	keys, err := core.Register(rt, "ratelimit", limiter.New)
	if err != nil {
		log.Fatal(err)
	}
	key, err := keys.Get("user-7")
	if err != nil {
		log.Fatal(err)
	}
	check := func(now time.Time) limiter.Decision {
		d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
			return l.AllowAt(ctx, now, 5, time.Minute)
		})
		if err != nil {
			log.Fatal(err)
		}
		return d
	}

	start := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	for i := range 7 {
		d := check(start.Add(time.Duration(i) * time.Second))
		fmt.Printf("call %d: allowed=%v remaining=%d retry after %v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	d := check(start.Add(time.Minute))
	fmt.Printf("a minute later: allowed=%v\n", d.Allowed)
	// Output:
	// call 1: allowed=true remaining=4 retry after 0s
	// call 2: allowed=true remaining=3 retry after 0s
	// call 3: allowed=true remaining=2 retry after 0s
	// call 4: allowed=true remaining=1 retry after 0s
	// call 5: allowed=true remaining=0 retry after 56s
	// call 6: allowed=false remaining=0 retry after 55s
	// call 7: allowed=false remaining=0 retry after 54s
	// a minute later: allowed=true
}

// Allow takes the time from the runtime's clock, core.Options.Now.
func ExampleLimiter_Allow() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	keys, err := core.Register(rt, "ratelimit", limiter.New)
	if err != nil {
		log.Fatal(err)
	}
	key, err := keys.Get("token-abc")
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
			return l.Allow(ctx, 2, time.Hour)
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("allowed:", d.Allowed)
	}
	// Output:
	// allowed: true
	// allowed: true
	// allowed: false
}
