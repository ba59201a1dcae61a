package limiter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// No goroutine outlives the runtimes the tests close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type stub = *core.Stub[*limiter.Limiter]

func mustOpen(t testing.TB) *core.Runtime {
	t.Helper()
	rt, err := core.Open(core.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	return rt
}

func mustRegister(t testing.TB, rt *core.Runtime) *core.Namespace[*limiter.Limiter] {
	t.Helper()
	keys, err := core.Register(rt, "ratelimit", limiter.New)
	require.NoError(t, err)
	return keys
}

func mustKey(t testing.TB, keys *core.Namespace[*limiter.Limiter], name string) stub {
	t.Helper()
	key, err := keys.Get(name)
	require.NoError(t, err)
	return key
}

func allowAt(key stub, now time.Time, limit int, window time.Duration) (limiter.Decision, error) {
	return core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
		return l.AllowAt(ctx, now, limit, window)
	})
}

// t0 is an arbitrary start for scripted clocks.
var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

// S-L1: window 60 s, limit 5. Of 7 calls the first 5 pass and the last 2
// are refused; each call leaves the window exactly 60 s after it was made,
// and then a call passes again.
func TestLimiter_AllowAt_SlidingWindow(t *testing.T) {
	keys := mustRegister(t, mustOpen(t))
	key := mustKey(t, keys, "user-7")
	const limit, window = 5, time.Minute
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for i, step := range []struct {
		at         float64 // seconds after t0
		allowed    bool
		remaining  int
		resetAt    float64
		retryAfter time.Duration
	}{
		{at: 0, allowed: true, remaining: 4, resetAt: 60},
		{at: 1, allowed: true, remaining: 3, resetAt: 60},
		{at: 2, allowed: true, remaining: 2, resetAt: 60},
		{at: 3, allowed: true, remaining: 1, resetAt: 60},
		{at: 4, allowed: true, remaining: 0, resetAt: 60, retryAfter: 56 * time.Second},
		{at: 5, allowed: false, remaining: 0, resetAt: 60, retryAfter: 55 * time.Second},
		{at: 6, allowed: false, remaining: 0, resetAt: 60, retryAfter: 54 * time.Second},
		// The window slides: the call made at 0 leaves it at 60, exactly.
		{at: 59.999, allowed: false, remaining: 0, resetAt: 60, retryAfter: time.Millisecond},
		{at: 60, allowed: true, remaining: 0, resetAt: 61, retryAfter: time.Second},
		{at: 60.5, allowed: false, remaining: 0, resetAt: 61, retryAfter: 500 * time.Millisecond},
		// At 64 the calls made at 1, 2, 3 and 4 have left; 60 remains.
		{at: 64, allowed: true, remaining: 3, resetAt: 120},
	} {
		got, err := allowAt(key, sec(step.at), limit, window)
		require.NoError(t, err, "step %d", i)
		want := limiter.Decision{
			Allowed:    step.allowed,
			Limit:      limit,
			Remaining:  step.remaining,
			RetryAfter: step.retryAfter,
		}
		require.True(t, got.ResetAt.Equal(sec(step.resetAt)), "step %d (t0+%vs): ResetAt got %v, want t0+%vs", i, step.at, got.ResetAt.Sub(t0), step.resetAt)
		got.ResetAt = time.Time{}
		require.Equal(t, want, got, "step %d (t0+%vs)", i, step.at)
	}
}

// S-L1 as the original measured it: 7 calls in a row, on the real clock.
func TestLimiter_Allow_FirstFivePass(t *testing.T) {
	keys := mustRegister(t, mustOpen(t))
	key := mustKey(t, keys, "user-7")
	var got []bool
	for range 7 {
		d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
			return l.Allow(ctx, 5, time.Minute)
		})
		require.NoError(t, err)
		got = append(got, d.Allowed)
	}
	require.Equal(t, []bool{true, true, true, true, true, false, false}, got)
}

// S-L2: an allowed call writes one row; a refused one writes none beyond
// the expired rows it deletes, and deleting them is billed as writing.
func TestLimiter_AllowAt_RowsWritten(t *testing.T) {
	rt := mustOpen(t)
	// The test keeps each object's State to read its storage counters,
	// inside a turn of that object.
	var (
		mu     sync.Mutex // protects states
		states = map[string]*core.State{}
	)
	keys, err := core.Register(rt, "ratelimit", func(ctx context.Context, st *core.State) (*limiter.Limiter, error) {
		mu.Lock()
		states[st.Name()] = st
		mu.Unlock()
		return limiter.New(ctx, st)
	})
	require.NoError(t, err)
	key := mustKey(t, keys, "ip-1")

	// written returns the rows an AllowAt at now writes, and its decision.
	written := func(now time.Time) (int64, bool) {
		type result struct {
			rows    int64
			allowed bool
		}
		r, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (result, error) {
			mu.Lock()
			st := states["ip-1"]
			mu.Unlock()
			before := st.Storage().Stats().RowsWritten
			d, err := l.AllowAt(ctx, now, 5, time.Minute)
			return result{st.Storage().Stats().RowsWritten - before, d.Allowed}, err
		})
		require.NoError(t, err)
		return r.rows, r.allowed
	}
	for i := range 5 {
		rows, allowed := written(t0.Add(time.Duration(i) * time.Second))
		require.True(t, allowed, "call %d", i)
		require.Equal(t, int64(1), rows, "call %d: an allowed call writes its row", i)
	}
	for i := range 2 {
		rows, allowed := written(t0.Add(10 * time.Second))
		require.False(t, allowed, "call %d over the limit", i)
		require.Equal(t, int64(0), rows, "call %d over the limit: refusals write nothing", i)
	}
	rows, allowed := written(t0.Add(2 * time.Minute))
	require.True(t, allowed)
	require.Equal(t, int64(5+1), rows, "after the window: 5 expired rows deleted, 1 inserted")
}

// S-L1: a hot key under 64 concurrent callers never lets more than limit
// calls through in any window. Each caller takes its time from a shared
// clock that advances with every call, so calls reach the object slightly
// out of order, as they do from real clients.
func TestLimiter_AllowAt_HotKeyNeverOverLimit(t *testing.T) {
	keys := mustRegister(t, mustOpen(t))
	key := mustKey(t, keys, "shared-ip")
	const (
		callers = 64
		calls   = 20 // per caller
		limit   = 10
		window  = time.Second
		tick    = 5 * time.Millisecond // clock advance per call: 6.4 windows in all
	)
	var (
		clock  atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex // protects passed and errs
		passed []time.Time
		errs   []error
	)
	for range callers {
		wg.Go(func() {
			for range calls {
				// The time is read in the turn, as Allow reads the
				// runtime's clock: the key sees its calls' times in order.
				var now time.Time
				d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
					now = t0.Add(time.Duration(clock.Add(1)) * tick)
					return l.AllowAt(ctx, now, limit, window)
				})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if d.Allowed {
					passed = append(passed, now)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.NotEmpty(t, passed)
	slices.SortFunc(passed, time.Time.Compare)
	// Two calls share a window when they are less than window apart, so
	// the call limit places later must be at least window later.
	for i := range len(passed) - limit {
		require.GreaterOrEqual(t, passed[i+limit].Sub(passed[i]), window,
			"%d calls allowed between %v and %v", limit+1, passed[i].Sub(t0), passed[i+limit].Sub(t0))
	}
	t.Logf("%d of %d calls allowed over %v", len(passed), callers*calls, time.Duration(callers*calls)*tick)
}

// The same hot key on the fake clock: 64 callers at the same instant get
// exactly limit passes, and after the window exactly limit again.
func TestLimiter_Allow_HotKeyExactOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := mustRegister(t, mustOpen(t))
		key := mustKey(t, keys, "shared-ip")
		burst := func() (allowed int) {
			var wg sync.WaitGroup
			var n atomic.Int64
			for range 64 {
				wg.Go(func() {
					d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
						return l.Allow(ctx, 10, time.Minute)
					})
					if err == nil && d.Allowed {
						n.Add(1)
					}
				})
			}
			wg.Wait()
			return int(n.Load())
		}
		require.Equal(t, 10, burst(), "first window")
		time.Sleep(time.Minute) // the fake clock: returns at once
		require.Equal(t, 10, burst(), "next window")
	})
}

// A limit below 1 or a window that is not positive is an error.
func TestLimiter_AllowAt_InvalidLimit(t *testing.T) {
	keys := mustRegister(t, mustOpen(t))
	key := mustKey(t, keys, "k")
	for _, tc := range []struct {
		limit  int
		window time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {5, 0}, {5, -time.Second}} {
		_, err := allowAt(key, t0, tc.limit, tc.window)
		require.ErrorIs(t, err, limiter.ErrInvalidLimit, "%d per %v", tc.limit, tc.window)
		require.ErrorContains(t, err, fmt.Sprintf("limiter: invalid limit: %d calls per %v", tc.limit, tc.window))
	}
}

// clock is a scripted core.Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// Allow and the middleware keep the window by the runtime's clock
// (Options.Now), not by time.Now: shifting the runtime's clock slides
// the window.
func TestLimiter_Allow_RuntimeClock(t *testing.T) {
	clk := newClock(t0)
	rt, err := core.Open(core.Options{Now: clk.now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	keys := mustRegister(t, rt)
	key := mustKey(t, keys, "user-7")
	allow := func() limiter.Decision {
		t.Helper()
		d, err := core.Call(context.Background(), key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
			return l.Allow(ctx, 2, time.Minute)
		})
		require.NoError(t, err)
		return d
	}

	for i := range 2 {
		require.True(t, allow().Allowed, "call %d", i)
	}
	d := allow()
	require.False(t, d.Allowed, "over the limit")
	require.Equal(t, t0.Add(time.Minute), d.ResetAt.UTC(), "the first call's time, by the runtime's clock, plus the window")
	require.Equal(t, time.Minute, d.RetryAfter)
	clk.advance(time.Minute)
	require.True(t, allow().Allowed, "a minute later by the runtime's clock")

	handler := (&limiter.HTTP{Limiters: keys, Limit: 1, Window: time.Minute}).Middleware(http.NotFoundHandler())
	for i, step := range []struct {
		advance    time.Duration
		code       int
		retryAfter string
	}{
		{0, http.StatusNotFound, ""},
		{30 * time.Second, http.StatusTooManyRequests, "30"},
		{30 * time.Second, http.StatusNotFound, ""},
	} {
		clk.advance(step.advance)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		require.Equal(t, step.code, w.Code, "request %d", i)
		require.Equal(t, step.retryAfter, w.Header().Get("Retry-After"), "request %d", i)
	}
}
