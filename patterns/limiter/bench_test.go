package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
	"golang.org/x/time/rate"
)

// The benchmarks' policy: 100 calls per minute per key.
const (
	benchLimit  = 100
	benchWindow = time.Minute
)

// BenchmarkAllow measures checks per second with 64 concurrent callers,
// on one hot key and spread evenly over 10,000 keys: the durable Limiter
// (one object per key, default core.Options) beside the in-memory baseline,
// one golang.org/x/time/rate.Limiter per key in a sync.Map. allowed/op is
// the share of checks that passed.
//
// The durable keys are created (each key checked once) before timing
// starts, and kept for every round of a sub-benchmark. With 10,000 keys
// and the default MaxOpenObjects of 1024, about nine checks in ten find
// their key's object evicted and reopen its database first: that is the
// steady state of many keys, and what the figure measures. Creating the
// keys takes about half a minute; the log reports its rate.
//
//	go test -run '^$' -bench . -benchtime 1s ./patterns/limiter
func BenchmarkAllow(b *testing.B) {
	for _, keys := range []int{1, 10_000} {
		fx := &durableKeys{n: keys}
		b.Run(fmt.Sprintf("impl=durable/keys=%d/callers=64", keys), func(b *testing.B) {
			stubs := fx.get(b)
			check := func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
				return l.Allow(ctx, benchLimit, benchWindow)
			}
			run(b, keys, func(i int) (bool, error) {
				d, err := core.Call(context.Background(), stubs[i], check)
				return d.Allowed, err
			})
		})
		fx.close() // before the baseline runs: closing is work of its own
		b.Run(fmt.Sprintf("impl=x-time-rate/keys=%d/callers=64", keys), func(b *testing.B) {
			benchRate(b, keys)
		})
	}
}

// durableKeys is a runtime with n limiter keys, made on first use and
// shared by the rounds of one sub-benchmark.
type durableKeys struct {
	n     int
	rt    *core.Runtime
	stubs []stub
}

func (fx *durableKeys) get(b *testing.B) []stub {
	if fx.rt != nil {
		return fx.stubs
	}
	rt, err := core.Open(core.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fx.rt = rt
	ns, err := core.Register(rt, "ratelimit", limiter.New)
	if err != nil {
		b.Fatal(err)
	}
	fx.stubs = make([]stub, fx.n)
	for i := range fx.stubs {
		if fx.stubs[i], err = ns.Get("key-" + strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < fx.n && failed.Load() == nil; i = int(next.Add(1)) - 1 {
				_, err := core.Call(context.Background(), fx.stubs[i], func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
					return l.Allow(ctx, benchLimit, benchWindow)
				})
				if err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	if fx.n > 1 {
		d := time.Since(start)
		b.Logf("created %d keys in %v: %.0f objects/s", fx.n, d.Round(time.Millisecond), float64(fx.n)/d.Seconds())
	}
	return fx.stubs
}

func (fx *durableKeys) close() {
	if fx.rt != nil {
		fx.rt.Close()
		fx.rt, fx.stubs = nil, nil
	}
}

func benchRate(b *testing.B, keys int) {
	var limiters sync.Map // key -> *rate.Limiter
	names := make([]string, keys)
	for i := range names {
		names[i] = "key-" + strconv.Itoa(i)
	}
	every := rate.Every(benchWindow / benchLimit)
	run(b, keys, func(i int) (bool, error) {
		l, ok := limiters.Load(names[i])
		if !ok {
			l, _ = limiters.LoadOrStore(names[i], rate.NewLimiter(every, benchLimit))
		}
		return l.(*rate.Limiter).Allow(), nil
	})
}

// run calls allow from 64 goroutines, each on keys chosen at random.
func run(b *testing.B, keys int, allow func(key int) (bool, error)) {
	b.ReportAllocs()
	b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var allowed atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for pb.Next() {
			ok, err := allow(rnd.IntN(keys))
			if err != nil {
				b.Error(err)
				return
			}
			if ok {
				allowed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}
