//go:build exercises

package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

var t0 = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

func limiters(t *testing.T, rt *core.Runtime) *core.Namespace[*Limiter] {
	t.Helper()
	ns, err := core.Register(rt, "ratelimit", newLimiter)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func key(t *testing.T, ns *core.Namespace[*Limiter], name string) *core.Stub[*Limiter] {
	t.Helper()
	stub, err := ns.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return stub
}

func allowAt(t *testing.T, stub *core.Stub[*Limiter], now time.Time, limit int, window time.Duration) Decision {
	t.Helper()
	d, err := core.Call(t.Context(), stub, func(ctx context.Context, l *Limiter) (Decision, error) {
		return l.AllowAt(ctx, now, limit, window)
	})
	if err != nil {
		t.Fatalf("AllowAt(%v, %d, %v): %v", now.Sub(t0), limit, window, err)
	}
	return d
}

// SEMANTICS L1: window 60 s, limit 5, seven calls: five pass, two refused.
func TestAllowAt_SevenCallsFivePass(t *testing.T) {
	stub := key(t, limiters(t, coretest.Open(t, core.Options{})), "user-7")
	for i, want := range []struct {
		allowed    bool
		remaining  int
		retryAfter time.Duration
	}{
		{true, 4, 0},
		{true, 3, 0},
		{true, 2, 0},
		{true, 1, 0},
		{true, 0, 56 * time.Second}, // the first call, at t0, leaves at t0+60s; this is t0+4s
		{false, 0, 55 * time.Second},
		{false, 0, 54 * time.Second},
	} {
		now := t0.Add(time.Duration(i) * time.Second)
		d := allowAt(t, stub, now, 5, time.Minute)
		if d.Allowed != want.allowed || d.Remaining != want.remaining || d.RetryAfter != want.retryAfter || d.Limit != 5 {
			t.Errorf("call %d: got %+v, want allowed %t, remaining %d, retry after %v, limit 5", i+1, d, want.allowed, want.remaining, want.retryAfter)
		}
		if want := t0.Add(time.Minute); !d.ResetAt.Equal(want) {
			t.Errorf("call %d: ResetAt %v, want %v (the oldest call plus the window)", i+1, d.ResetAt, want)
		}
	}
}

func TestAllowAt_TheWindowSlides(t *testing.T) {
	stub := key(t, limiters(t, coretest.Open(t, core.Options{})), "user-7")
	for i := range 3 {
		allowAt(t, stub, t0.Add(time.Duration(i)*10*time.Second), 3, time.Minute) // at 0, 10, 20 s
	}
	if d := allowAt(t, stub, t0.Add(59*time.Second), 3, time.Minute); d.Allowed {
		t.Errorf("at 59 s: allowed, want refused (3 calls in the window)")
	}
	// The call at 0 s leaves the window at exactly 60 s.
	d := allowAt(t, stub, t0.Add(60*time.Second), 3, time.Minute)
	if !d.Allowed || d.Remaining != 0 {
		t.Errorf("at 60 s: got %+v, want allowed with 0 remaining", d)
	}
	if want := t0.Add(70 * time.Second); !d.ResetAt.Equal(want) {
		t.Errorf("at 60 s: ResetAt %v, want %v (the call at 10 s leaves then)", d.ResetAt.Sub(t0), want.Sub(t0))
	}
	// A refused call is not counted: at 70 s one frees up again.
	allowAt(t, stub, t0.Add(65*time.Second), 3, time.Minute)
	if d := allowAt(t, stub, t0.Add(70*time.Second), 3, time.Minute); !d.Allowed {
		t.Errorf("at 70 s: refused, want allowed (refused calls must not count)")
	}
}

func TestAllowAt_KeysAreIndependent(t *testing.T) {
	ns := limiters(t, coretest.Open(t, core.Options{}))
	a, b := key(t, ns, "10.0.0.1"), key(t, ns, "10.0.0.2")
	allowAt(t, a, t0, 1, time.Minute)
	if d := allowAt(t, b, t0, 1, time.Minute); !d.Allowed {
		t.Error("a second key was refused because of the first")
	}
	if d := allowAt(t, a, t0, 1, time.Minute); d.Allowed {
		t.Error("the first key was allowed twice with limit 1")
	}
}

func TestAllowAt_InvalidLimits(t *testing.T) {
	stub := key(t, limiters(t, coretest.Open(t, core.Options{})), "k")
	for _, tc := range []struct {
		limit  int
		window time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {5, 0}, {5, -time.Second}} {
		_, err := core.Call(t.Context(), stub, func(ctx context.Context, l *Limiter) (Decision, error) {
			return l.AllowAt(ctx, t0, tc.limit, tc.window)
		})
		if !errors.Is(err, errInvalidLimit) {
			t.Errorf("AllowAt(limit %d, window %v): got %v, want ErrInvalidLimit", tc.limit, tc.window, err)
		}
	}
}

// The count is in storage: a restart does not reset it.
func TestAllowAt_CountSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	for run, want := range []bool{true, false} {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		stub := key(t, limiters(t, rt), "user-7")
		d := allowAt(t, stub, t0.Add(time.Duration(run)*time.Second), 1, time.Minute)
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Errorf("run %d: allowed %t, want %t", run+1, d.Allowed, want)
		}
	}
}

// Many callers at once: exactly limit of them pass.
func TestAllow_ConcurrentCallersNeverExceedTheLimit(t *testing.T) {
	stub := key(t, limiters(t, coretest.Open(t, core.Options{})), "hot")
	var mu sync.Mutex // protects allowed, errs
	allowed := 0
	var errs []error
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			d, err := core.Call(t.Context(), stub, func(ctx context.Context, l *Limiter) (Decision, error) {
				return l.Allow(ctx, 10, time.Hour)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if d.Allowed {
				allowed++
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of 40 calls of Allow failed; the first: %v", len(errs), errs[0])
	}
	switch {
	case allowed > 10:
		t.Errorf("40 callers, limit 10: %d allowed: callers counted the same window; is there an await between counting the window's hits and recording this one? "+
			"Only storage calls keep the input gate shut (SEMANTICS C1)", allowed)
	case allowed < 10:
		t.Errorf("40 callers, limit 10: %d allowed: is a refused call recorded as a hit?", allowed)
	}
}
