package counter_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// No goroutine outlives the runtimes and stores the tests and examples close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logs collects the JSON records of a slog.Logger.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// failure is an alarm_failed record, with the original's fields.
type failure struct {
	Time        time.Time `json:"time"`
	Level       string    `json:"level"`
	Event       string    `json:"event"`
	Do          string    `json:"do"`
	RetryCount  int       `json:"retryCount"`
	LastAttempt bool      `json:"lastAttempt"`
	Error       string    `json:"error"`
}

func (l *logs) failures(t testing.TB) []failure {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []failure
	dec := json.NewDecoder(bytes.NewReader(l.buf.Bytes()))
	for dec.More() {
		var f failure
		require.NoError(t, dec.Decode(&f))
		if f.Event == "alarm_failed" {
			out = append(out, f)
		}
	}
	return out
}

// write is one call to a sink's Write.
type write struct {
	at     time.Time
	link   string
	counts []counter.Count
}

// sink wraps a Sink: it records every Write, and can fail on purpose.
type sink struct {
	next counter.Sink

	mu         sync.Mutex // protects the fields below
	writes     []write    // the Writes that reached next
	failBefore int        // fail the next n Writes without writing
	failAfter  int        // fail the next n Writes after writing: the ack was lost
	delay      time.Duration
}

var errDown = errors.New("analytics store unreachable")

func (s *sink) Write(ctx context.Context, link string, counts []counter.Count) error {
	s.mu.Lock()
	delay := s.delay
	if s.failBefore > 0 {
		s.failBefore--
		s.mu.Unlock()
		return errDown
	}
	s.mu.Unlock()
	time.Sleep(delay) // a slow store: the counter's gate is open meanwhile
	if err := s.next.Write(ctx, link, counts); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, write{at: time.Now(), link: link, counts: slices.Clone(counts)})
	if s.failAfter > 0 {
		s.failAfter--
		return fmt.Errorf("written, but the reply timed out: %w", errDown)
	}
	return nil
}

func (s *sink) log() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// env is a runtime with a "counters" namespace flushing through a test sink
// into a Store.
type env struct {
	rt    *core.Runtime
	ns    *core.Namespace[*counter.Counter]
	store *counter.Store
	sink  *sink
	logs  *logs
}

var noJitter = core.RetryPolicy{Jitter: -1}

// setup opens a store and a runtime (over dir, "" for a private one) in the
// test's bubble; both are closed when the test ends. next is the sink behind
// the test sink (nil: the store).
func setup(t testing.TB, dir string, opts core.Options, next counter.Sink) *env {
	t.Helper()
	store, err := counter.OpenStore(filepath.Join(t.TempDir(), "analytics.sqlite"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	if next == nil {
		next = store
	}
	e := &env{store: store, sink: &sink{next: next}, logs: &logs{}}
	e.open(t, dir, opts)
	return e
}

// open opens the runtime (again, after a restart).
func (e *env) open(t testing.TB, dir string, opts core.Options) {
	t.Helper()
	opts.Dir = dir
	opts.Synchronous = "NORMAL"
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() }) // runs before the store's Close
	ns, err := core.Register(rt, "counters", counter.Options{Sink: e.sink, Logger: e.logs.logger()}.New)
	require.NoError(t, err)
	e.rt, e.ns = rt, ns
}

func (e *env) stub(t testing.TB, link string) *core.Stub[*counter.Counter] {
	t.Helper()
	s, err := e.ns.Get(link)
	require.NoError(t, err)
	return s
}

func (e *env) record(t testing.TB, link string) {
	t.Helper()
	require.NoError(t, core.Do(context.Background(), e.stub(t, link), func(ctx context.Context, c *counter.Counter) error {
		return c.Record(ctx)
	}))
}

// flushAt returns the pending flush of link, if any.
func (e *env) flushAt(t testing.TB, link string) (time.Time, bool) {
	t.Helper()
	var at time.Time
	var ok bool
	require.NoError(t, core.Do(context.Background(), e.stub(t, link), func(ctx context.Context, c *counter.Counter) error {
		var err error
		at, ok, err = c.FlushAt(ctx)
		return err
	}))
	return at, ok
}

func (e *env) storeTotal(t testing.TB, link string) int64 {
	t.Helper()
	n, err := e.store.Total(context.Background(), link)
	require.NoError(t, err)
	return n
}

// S-K1: 1,000 records, one flush; the store holds 1,000.
func TestCounter_ThousandRecordsOneFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{}, nil)
		t0 := time.Now()
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() { e.record(t, "link-1") })
		}
		wg.Wait()
		at, ok := e.flushAt(t, "link-1")
		require.True(t, ok)
		require.Equal(t, counter.DefaultFlushAfter, at.Sub(t0), "armed by the first record, 30 s out")

		time.Sleep(counter.DefaultFlushAfter)
		synctest.Wait()
		writes := e.sink.log()
		require.Len(t, writes, 1, "one flush")
		require.Equal(t, []counter.Count{{Bucket: t0.UTC().Truncate(time.Minute), N: 1000}}, writes[0].counts)
		require.EqualValues(t, 1000, e.storeTotal(t, "link-1"))
	})
}

// S-A4: 5 hits -> 1 alarm -> 1 flush of n=5; no alarm afterwards.
func TestCounter_DebounceFiveHits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{}, nil)
		t0 := time.Now()
		for i := range 5 {
			e.record(t, "link-1")
			at, ok := e.flushAt(t, "link-1")
			require.True(t, ok)
			require.Equal(t, 30*time.Second, at.Sub(t0), "hit %d leaves the first alarm alone", i)
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		writes := e.sink.log()
		require.Len(t, writes, 1)
		require.Equal(t, 30*time.Second, writes[0].at.Sub(t0))
		require.Equal(t, int64(5), writes[0].counts[0].N)
		_, ok := e.flushAt(t, "link-1")
		require.False(t, ok, "alarm none afterwards")
		require.EqualValues(t, 0, e.rt.Stats().Alarms)
	})
}

// S-K2, S-A3: a flush that fails twice, then succeeds, gives exactly the
// right totals, hits recorded between the attempts included; each failure
// is logged with the original's fields.
func TestCounter_FailedFlushIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{AlarmRetry: noJitter}, nil)
		e.sink.failBefore = 2
		t0 := time.Now()
		for range 10 {
			e.record(t, "link-1")
		}
		time.Sleep(33 * time.Second) // runs at t0+30 s and t0+32 s failed
		for range 5 {
			e.record(t, "link-1")
		}
		time.Sleep(time.Minute)
		synctest.Wait()

		fails := e.logs.failures(t)
		require.Len(t, fails, 2)
		for i, f := range fails {
			require.Equal(t, []time.Duration{30 * time.Second, 32 * time.Second}[i], f.Time.Sub(t0), "failure %d", i)
			f.Time = time.Time{}
			require.Equal(t, failure{
				Level: "WARN", Event: "alarm_failed", Do: "link-1",
				RetryCount: i, LastAttempt: false, Error: errDown.Error(),
			}, f, "failure %d", i)
		}
		writes := e.sink.log()
		require.Len(t, writes, 1)
		require.Equal(t, 36*time.Second, writes[0].at.Sub(t0), "the second retry, 2 s + 4 s later")
		require.EqualValues(t, 15, e.storeTotal(t, "link-1"))
		_, ok := e.flushAt(t, "link-1")
		require.False(t, ok)
	})
}

// S-K2, S-A5: when every attempt fails, the last failure says
// lastAttempt=true (at level ERROR: alert on it) and the alarm is dropped;
// the hits are still stored, unflushed, and the next hit arms a flush that
// sends them all.
func TestCounter_LastAttemptThenRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{AlarmRetry: noJitter, OnAlarmDropped: func(core.DeadLetter) {}}, nil)
		e.sink.failBefore = 7
		for range 3 {
			e.record(t, "link-1")
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		fails := e.logs.failures(t)
		require.Len(t, fails, 7)
		for i, f := range fails {
			require.Equal(t, i, f.RetryCount)
			require.Equal(t, i == 6, f.LastAttempt, "failure %d", i)
			require.Equal(t, map[bool]string{false: "WARN", true: "ERROR"}[i == 6], f.Level)
		}
		_, ok := e.flushAt(t, "link-1")
		require.False(t, ok, "dropped")
		require.EqualValues(t, 0, e.storeTotal(t, "link-1"))

		e.record(t, "link-1")
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 4, e.storeTotal(t, "link-1"), "nothing was lost with the alarm")
	})
}

// S-K2, S-C2: hits recorded while the flush waits for the store (the gate is
// open) are not lost: their bucket stays unflushed, and the hit that found
// no alarm pending (S-A13) armed the flush that sends it.
func TestCounter_HitsDuringFlushAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{}, nil)
		e.sink.delay = time.Second
		t0 := time.Now()
		for range 5 {
			e.record(t, "link-1")
		}
		time.Sleep(30*time.Second + 500*time.Millisecond) // the flush is inside its Await
		for range 3 {
			e.record(t, "link-1")
		}
		at, ok := e.flushAt(t, "link-1")
		require.True(t, ok, "armed by a hit during the flush")
		require.Equal(t, 60*time.Second+500*time.Millisecond, at.Sub(t0))

		time.Sleep(time.Second)
		synctest.Wait()
		require.EqualValues(t, 5, e.storeTotal(t, "link-1"), "the first flush sent what it had read")
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 8, e.storeTotal(t, "link-1"), "the hits during it came with the next")
		writes := e.sink.log()
		require.Len(t, writes, 2)
		require.Equal(t, int64(8), writes[1].counts[0].N, "absolute count of the same bucket")
	})
}

// incrementSink is the counter-example of S-K3: the same click_rollup
// table, but the upsert adds what it is sent (count = count + ?).
type incrementSink struct{ db *sql.DB }

func openIncrementSink(t testing.TB) *incrementSink {
	t.Helper()
	path := filepath.Join(t.TempDir(), "increments.sqlite")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE TABLE click_rollup(link_id TEXT NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (link_id, bucket))`)
	require.NoError(t, err)
	return &incrementSink{db: db}
}

func (s *incrementSink) Write(ctx context.Context, link string, counts []counter.Count) error {
	for _, c := range counts {
		_, err := s.db.ExecContext(ctx, `INSERT INTO click_rollup(link_id, bucket, count) VALUES (?, ?, ?)
ON CONFLICT(link_id, bucket) DO UPDATE SET count = count + ?`, link, c.Bucket.UnixMilli(), c.N, c.N)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *incrementSink) total(t testing.TB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.db.QueryRow("SELECT coalesce(sum(count), 0) FROM click_rollup").Scan(&n))
	return n
}

// S-K3: a flush whose write succeeds but whose reply is lost is sent again
// by the retry. Absolute counts (the Store) come out right; the same flush
// written as increments doubles the total.
func TestCounter_RetryWithIncrementsInflates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		abs := setup(t, "", core.Options{AlarmRetry: noJitter}, nil)
		inc := openIncrementSink(t)
		incr := setup(t, "", core.Options{AlarmRetry: noJitter}, inc)
		for _, e := range []*env{abs, incr} {
			e.sink.failAfter = 1
			for range 10 {
				e.record(t, "link-1")
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, e := range []*env{abs, incr} {
			require.Len(t, e.sink.log(), 2, "written, failed, retried, written again")
			require.Len(t, e.logs.failures(t), 1)
		}
		require.EqualValues(t, 10, abs.storeTotal(t, "link-1"), "absolute: the retry is harmless")
		require.EqualValues(t, 20, inc.total(t), "increments: the retry doubled the total")
	})
}

// S-K4: with a 30 s flush and per-minute buckets, under steady traffic
// (a hit every 2 s for 6 minutes) each bucket is written at most twice
// while it is the current minute, and once more after it closes for the
// hits after its last in-minute flush: at most 3 writes in all. (The original
// says "at most twice"; that holds only for the writes during the minute.)
func TestCounter_WritesPerBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{}, nil)
		t0 := time.Now()
		const every, span = 2 * time.Second, 6 * time.Minute
		for range span / every {
			e.record(t, "link-1")
			time.Sleep(every)
		}
		time.Sleep(time.Minute)
		synctest.Wait()

		perBucket := map[time.Time]int{}
		inMinute := map[time.Time]int{}
		for _, w := range e.sink.log() {
			for _, c := range w.counts {
				perBucket[c.Bucket]++
				if w.at.Before(c.Bucket.Add(time.Minute)) {
					inMinute[c.Bucket]++
				}
			}
		}
		require.Len(t, perBucket, 6)
		hist := map[int]int{}
		for b, n := range perBucket {
			require.LessOrEqual(t, inMinute[b], 2, "bucket %v: writes during its minute", b.Sub(t0))
			require.LessOrEqual(t, n, 3, "bucket %v: writes in all", b.Sub(t0))
			hist[n]++
		}
		t.Logf("buckets by writes: %v (flushes: %d)", hist, len(e.sink.log()))
		counts, err := e.store.Counts(context.Background(), "link-1")
		require.NoError(t, err)
		for _, c := range counts {
			require.Equal(t, int64(time.Minute/every), c.N, "bucket %v", c.Bucket.Sub(t0))
		}
	})
}

// S-A16, S-A7: the constructor does not arm, so waking an evicted counter
// (constructor again) does not postpone its flush.
func TestCounter_WakeDoesNotPostponeFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{IdleTimeout: 5 * time.Second}, nil)
		t0 := time.Now()
		e.record(t, "link-1")
		for range 2 {
			time.Sleep(10 * time.Second) // evicted
			require.EqualValues(t, 0, e.rt.Stats().Resident)
			at, ok := e.flushAt(t, "link-1") // woken: the constructor ran again
			require.True(t, ok)
			require.Equal(t, 30*time.Second, at.Sub(t0))
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		writes := e.sink.log()
		require.Len(t, writes, 1)
		require.Equal(t, 30*time.Second, writes[0].at.Sub(t0))
	})
}

// S-A7: buckets and the pending flush survive a restart; a flush that came
// due while the runtime was down runs when it is back.
func TestCounter_SurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := setup(t, dir, core.Options{}, nil)
		for range 7 {
			e.record(t, "link-1")
		}
		require.NoError(t, e.rt.Close())

		time.Sleep(time.Minute)
		t1 := time.Now()
		e.open(t, dir, core.Options{})
		synctest.Wait()
		writes := e.sink.log()
		require.Len(t, writes, 1)
		require.Equal(t, time.Duration(0), writes[0].at.Sub(t1), "overdue: runs at once")
		require.EqualValues(t, 7, e.storeTotal(t, "link-1"))
	})
}

// Several links flush to one store, each its own rows; a counter without a
// sink fails to construct with a clear error.
func TestCounter_LinksAndBadOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := setup(t, "", core.Options{}, nil)
		for i := range 3 {
			for range i + 1 {
				e.record(t, fmt.Sprint("link-", i))
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		for i := range 3 {
			require.EqualValues(t, i+1, e.storeTotal(t, fmt.Sprint("link-", i)))
		}

		bad, err := core.Register(e.rt, "nosink", counter.Options{}.New)
		require.NoError(t, err)
		s, err := bad.Get("x")
		require.NoError(t, err)
		err = core.Do(context.Background(), s, func(ctx context.Context, c *counter.Counter) error { return c.Record(ctx) })
		require.ErrorContains(t, err, "counter: Options.Sink is nil")
	})
}
