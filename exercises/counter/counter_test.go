//go:build exercises

package counter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

const flushAfter = 30 * time.Second

// sink is the analytics store: absolute counts by (link, bucket), and a
// log of the writes. It can fail, and be slow.
type sink struct {
	mu         sync.Mutex // protects the fields below
	counts     map[string]map[int64]int64
	writes     int           // calls to Write
	failBefore int           // fail this many next writes without storing
	failAfter  int           // store, then fail, this many next writes (a lost answer)
	slow       time.Duration // each write takes this long
}

func newSink() *sink { return &sink{counts: map[string]map[int64]int64{}} }

func (s *sink) Write(ctx context.Context, link string, counts []Count) error {
	s.mu.Lock()
	s.writes++
	slow := s.slow
	if s.failBefore > 0 {
		s.failBefore--
		s.mu.Unlock()
		return errors.New("analytics store unavailable")
	}
	s.mu.Unlock()
	time.Sleep(slow)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[link] == nil {
		s.counts[link] = map[int64]int64{}
	}
	for _, c := range counts {
		if !c.Bucket.Equal(c.Bucket.Truncate(time.Minute)) {
			return errors.New("a bucket is not the start of a minute")
		}
		s.counts[link][c.Bucket.UnixMilli()] = c.N // absolute: replace
	}
	if s.failAfter > 0 {
		s.failAfter--
		return errors.New("timeout waiting for the answer")
	}
	return nil
}

func (s *sink) total(link string) (n int64, buckets int, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.counts[link] {
		n += c
	}
	return n, len(s.counts[link]), s.writes
}

func open(t *testing.T, s *sink, opts core.Options) (*core.Runtime, *core.Stub[*Counter]) {
	t.Helper()
	rt := coretest.Open(t, opts)
	return rt, register(t, rt, s)
}

func register(t *testing.T, rt *core.Runtime, s *sink) *core.Stub[*Counter] {
	t.Helper()
	ns, err := core.Register(rt, "counters", newCounter(s, flushAfter))
	if err != nil {
		t.Fatal(err)
	}
	stub, err := ns.Get("link-1")
	if err != nil {
		t.Fatal(err)
	}
	return stub
}

func record(t *testing.T, c *core.Stub[*Counter], n int) {
	t.Helper()
	for range n {
		if err := core.Do(t.Context(), c, func(ctx context.Context, x *Counter) error { return x.Record(ctx) }); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
}

func flushAt(t *testing.T, c *core.Stub[*Counter]) (time.Time, bool) {
	t.Helper()
	type r struct {
		at time.Time
		ok bool
	}
	got, err := core.Call(t.Context(), c, func(ctx context.Context, x *Counter) (r, error) {
		at, ok, err := x.FlushAt(ctx)
		return r{at, ok}, err
	})
	if err != nil {
		t.Fatalf("FlushAt: %v", err)
	}
	return got.at, got.ok
}

func wait(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// SEMANTICS A4, K1: five hits, one alarm, one flush of five.
func TestCounter_FiveHitsOneFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		_, c := open(t, s, core.Options{})
		start := time.Now()
		record(t, c, 5)
		if at, ok := flushAt(t, c); !ok || !at.Equal(start.Add(flushAfter)) {
			t.Errorf("FlushAt after the first hits: got %v %t, want 30 s after the first", at.Sub(start), ok)
		}
		total, err := core.Call(t.Context(), c, func(ctx context.Context, x *Counter) (int64, error) { return x.Total(ctx) })
		if err != nil || total != 5 {
			t.Errorf("Total: got %d, %v; want 5", total, err)
		}
		wait(flushAfter - time.Second)
		if _, _, writes := s.total("link-1"); writes != 0 {
			t.Errorf("%d writes before the flush was due", writes)
		}
		wait(2 * time.Second)
		if n, buckets, writes := s.total("link-1"); n != 5 || buckets != 1 || writes != 1 {
			t.Errorf("after the flush the store has %d hits in %d buckets after %d writes, want 5 in 1 after 1", n, buckets, writes)
		}
		if _, ok := flushAt(t, c); ok {
			t.Error("a flush is still pending after the flush")
		}
	})
}

// A hit while a flush is pending does not push it back.
func TestCounter_HitsDoNotPostponeTheFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		_, c := open(t, s, core.Options{})
		start := time.Now()
		record(t, c, 1)
		for range 5 {
			wait(5 * time.Second)
			record(t, c, 1)
			if at, _ := flushAt(t, c); !at.Equal(start.Add(flushAfter)) {
				t.Fatalf("a hit moved the flush to %v after the first hit, want 30 s", at.Sub(start))
			}
		}
	})
}

// Under steady traffic the flushes keep coming.
func TestCounter_SteadyTrafficIsFlushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		_, c := open(t, s, core.Options{})
		for range 24 { // a hit every 5 s for 2 minutes
			record(t, c, 1)
			wait(5 * time.Second)
		}
		wait(flushAfter)
		if n, buckets, writes := s.total("link-1"); n != 24 || buckets != 2 || writes < 4 {
			t.Errorf("the store has %d hits in %d buckets after %d writes, want 24 in 2 after 4 or more", n, buckets, writes)
		}
	})
}

// SEMANTICS K3: a flush whose write went through but seemed to fail is
// retried, and the absolute count cannot double.
func TestCounter_ARetriedFlushWritesTheSameCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		s.failAfter = 1
		_, c := open(t, s, core.Options{})
		record(t, c, 5)
		wait(flushAfter + 10*time.Second) // the flush, then its retry 2 s later
		if n, _, writes := s.total("link-1"); n != 5 || writes != 2 {
			t.Errorf("the store has %d hits after %d writes, want 5 after 2 (a failed write is retried, with absolute counts)", n, writes)
		}
	})
}

// A later flush of a bucket sends its whole count, not the hits since the
// last flush.
func TestCounter_ALaterFlushSendsTheWholeBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		_, c := open(t, s, core.Options{})
		record(t, c, 5)
		wait(flushAfter + time.Second) // still the first minute
		record(t, c, 3)
		wait(flushAfter + time.Second)
		if n, buckets, writes := s.total("link-1"); n != 8 || buckets != 1 || writes != 2 {
			t.Errorf("the store has %d hits in %d buckets after %d writes, want 8 in 1 after 2", n, buckets, writes)
		}
	})
}

// A flush that fails returns its error, and the runtime retries it
// (2 s, then 4 s later) until it works.
func TestCounter_AFailedFlushIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		s.failBefore = 2
		_, c := open(t, s, core.Options{AlarmRetry: core.RetryPolicy{Jitter: -1}})
		record(t, c, 5)
		wait(flushAfter + 5*time.Second) // two failures: the first run and the retry after 2 s
		if n, _, writes := s.total("link-1"); n != 0 || writes != 2 {
			t.Fatalf("after two failures the store has %d after %d writes, want 0 after 2", n, writes)
		}
		wait(2 * time.Second) // the retry 4 s after the second failure
		if n, _, writes := s.total("link-1"); n != 5 || writes != 3 {
			t.Errorf("after the third run the store has %d after %d writes, want 5 after 3", n, writes)
		}
	})
}

// Hits recorded while the flush waits for the sink are not lost.
func TestCounter_HitsDuringASlowFlushAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		s.slow = time.Second
		_, c := open(t, s, core.Options{})
		record(t, c, 5)
		wait(flushAfter + 500*time.Millisecond) // the flush is writing
		record(t, c, 2)                         // with the gate open, these run now
		wait(2 * flushAfter)
		if n, _, _ := s.total("link-1"); n != 7 {
			t.Errorf("the store has %d hits, want 7: hits recorded during the flush were marked flushed without being sent", n)
		}
	})
}

func TestCounter_OneBucketPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSink()
		_, c := open(t, s, core.Options{})
		record(t, c, 1)
		wait(61 * time.Second)
		record(t, c, 2)
		wait(2 * flushAfter)
		s.mu.Lock()
		defer s.mu.Unlock()
		minute := time.Now().Truncate(time.Minute) // two minutes after the first hit's
		first, second := minute.Add(-2*time.Minute).UnixMilli(), minute.Add(-time.Minute).UnixMilli()
		if got := s.counts["link-1"]; len(got) != 2 || got[first] != 1 || got[second] != 2 {
			t.Errorf("buckets (unix ms: hits): got %v, want %d: 1 and %d: 2", got, first, second)
		}
	})
}

// The pending flush is stored: one due while the runtime was down runs
// when it starts again.
func TestCounter_AFlushDueWhileDownRunsAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s := newSink()
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() }) // if the test fails early
		record(t, register(t, rt, s), 5)
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // down while the flush is due
		rt2, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt2.Close() })
		register(t, rt2, s)
		synctest.Wait()
		n, _, _ := s.total("link-1")
		if err := rt2.Close(); err != nil {
			t.Fatal(err)
		}
		if n != 5 {
			t.Errorf("after the restart the store has %d hits, want 5", n)
		}
	})
}
