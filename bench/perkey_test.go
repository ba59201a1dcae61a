package bench

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/durable-go/durable/core"
)

// callerCounts are the concurrent callers of the per-key benchmarks: all of
// them call the same object, so their turns run one at a time.
var callerCounts = []int{1, 16, 64}

// echo is an object without storage.
type echo struct{}

func newEcho(context.Context, *core.State) (*echo, error) { return &echo{}, nil }

// openEcho opens a runtime with one echo object, already activated.
func openEcho(b *testing.B, opts core.Options) (*core.Runtime, *core.Stub[*echo]) {
	b.Helper()
	rt := openRuntime(b, opts)
	ns, err := core.Register(rt, "echo", newEcho)
	if err != nil {
		b.Fatal(err)
	}
	s, err := ns.Get("the-one")
	if err != nil {
		b.Fatal(err)
	}
	if err := core.Do(context.Background(), s, func(context.Context, *echo) error { return nil }); err != nil {
		b.Fatal(err)
	}
	return rt, s
}

// BenchmarkForward measures the turn itself: the call returns a constant.
// S-W14: the original forwards 1,784 / 5,611 / 6,589 req/s at 1 / 16 / 64
// connections (over HTTP; these are in-process calls).
//
// telemetry=on runs it with a meter and a tracer (every span sampled and
// exported to nowhere), telemetry=metrics with the meter alone,
// telemetry=off with neither: the cost of measuring.
func BenchmarkForward(b *testing.B) {
	for _, tel := range telemetryModes {
		for _, callers := range callerCounts {
			b.Run("telemetry="+tel+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				rt, s := openEcho(b, withTelemetry(b, tel, core.Options{}))
				defer closeRuntime(b, rt)
				runCallers(b, callers, "calls/s", func(ctx context.Context) error {
					_, err := core.Call(ctx, s, func(context.Context, *echo) (int, error) { return 42, nil })
					return err
				})
			})
		}
	}
}

// order is the document BenchmarkProcess parses and re-serializes.
type order struct {
	ID       string     `json:"id"`
	Customer customer   `json:"customer"`
	Lines    []lineItem `json:"lines"`
	Total    float64    `json:"total"`
	Currency string     `json:"currency"`
	Paid     bool       `json:"paid"`
	Tags     []string   `json:"tags"`
}

type customer struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Address string `json:"address"`
}

type lineItem struct {
	SKU      string  `json:"sku"`
	Title    string  `json:"title"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"price"`
}

// orderJSON is a 1 KB order (checked by BenchmarkProcess).
var orderJSON = func() []byte {
	o := order{
		ID:       "ord-2026-000123456",
		Customer: customer{ID: 987654321, Name: "Ada Lovelace", Email: "ada@example.com", Address: "12 Analytical Engine Row, London"},
		Currency: "EUR",
		Paid:     true,
		Tags:     []string{"priority", "gift", "eu"},
	}
	for i := range 9 {
		o.Lines = append(o.Lines, lineItem{
			SKU:      "sku-" + strconv.Itoa(10000+i),
			Title:    "Widget, model " + strconv.Itoa(i) + ", blue",
			Quantity: i + 1,
			Price:    9.99 + float64(i),
		})
		o.Total += float64(i+1) * (9.99 + float64(i))
	}
	data, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return data
}()

// S-W14: the original's 1 KB JSON processing: 1,687 / 4,006 / 5,527 req/s.
// BenchmarkProcess measures CPU-bound turns: the call parses a 1 KB JSON
// document and serializes it again. One object runs one turn at a time,
// so more callers cannot use more cores.
func BenchmarkProcess(b *testing.B) {
	if n := len(orderJSON); n < 900 || n > 1100 {
		b.Fatalf("the document is %d bytes, want about 1 KB", n)
	}
	for _, callers := range callerCounts {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			rt, s := openEcho(b, core.Options{})
			defer closeRuntime(b, rt)
			runCallers(b, callers, "calls/s", func(ctx context.Context) error {
				_, err := core.Call(ctx, s, func(context.Context, *echo) ([]byte, error) {
					var o order
					if err := json.Unmarshal(orderJSON, &o); err != nil {
						return nil, err
					}
					return json.Marshal(&o)
				})
				return err
			})
		})
	}
}

// S-W14: the original's one INSERT per request: 983 / 2,166 / 2,555 req/s.
// BenchmarkWrite measures durable writes to one object: each call inserts
// one row and returns once it is committed. Turns queued behind a running
// one share its commit, so commits/op falls as callers rise. telemetry=on
// and off as in BenchmarkForward.
func BenchmarkWrite(b *testing.B) {
	for _, tel := range telemetryModes {
		for _, sync := range []string{"FULL", "NORMAL"} {
			for _, callers := range callerCounts {
				b.Run("telemetry="+tel+"/sync="+sync+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
					rt := openRuntime(b, withTelemetry(b, tel, core.Options{Synchronous: sync}))
					defer closeRuntime(b, rt)
					s := registerTables(b, rt, 1)[0]
					activate(b, []*core.Stub[*table]{s})
					before := rt.Stats().Commits
					runCallers(b, callers, "calls/s", func(ctx context.Context) error { return core.Do(ctx, s, insertCall) })
					b.ReportMetric(float64(rt.Stats().Commits-before)/float64(b.N), "commits/op")
				})
			}
		}
	}
}
