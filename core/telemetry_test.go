package core_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/replog/replogtest"
)

// metrics reads what a runtime exported through an in-memory reader.
type metrics struct {
	t      testing.TB
	reader *sdkmetric.ManualReader
}

// withMetrics sets opts.Meter to a provider read by the returned metrics.
func withMetrics(t testing.TB, opts *core.Options) *metrics {
	r := sdkmetric.NewManualReader()
	opts.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	return &metrics{t: t, reader: r}
}

func (m *metrics) collect() map[string]metricdata.Aggregation {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(m.t, m.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt.Data
		}
	}
	return out
}

func inNamespace(set attribute.Set, ns string) bool {
	v, ok := set.Value("durable.namespace")
	return ok && v.AsString() == ns
}

// value is a counter's or a gauge's value for namespace ns (0 if it has none).
func (m *metrics) value(name, ns string) int64 {
	m.t.Helper()
	switch d := m.collect()[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if inNamespace(p.Attributes, ns) {
				return p.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if inNamespace(p.Attributes, ns) {
				return p.Value
			}
		}
	case nil:
	default:
		m.t.Fatalf("%s is a %T", name, d)
	}
	return 0
}

// hist is a histogram's count, sum and max for namespace ns.
func (m *metrics) hist(name, ns string) (count uint64, sum, maxv float64) {
	m.t.Helper()
	switch d := m.collect()[name].(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if inNamespace(p.Attributes, ns) {
				mx, _ := p.Max.Value()
				return p.Count, p.Sum, mx
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if inNamespace(p.Attributes, ns) {
				mx, _ := p.Max.Value()
				return p.Count, float64(p.Sum), float64(mx)
			}
		}
	case nil:
	default:
		m.t.Fatalf("%s is a %T", name, d)
	}
	return 0, 0, 0
}

// box is an object for the telemetry tests: its calls are closures.
type box struct{ st *core.State }

func boxes(t testing.TB, rt *core.Runtime, ns string) *core.Namespace[*box] {
	t.Helper()
	n, err := core.Register(rt, ns, func(_ context.Context, st *core.State) (*box, error) { return &box{st: st}, nil })
	require.NoError(t, err)
	return n
}

func getBox(t testing.TB, n *core.Namespace[*box], name string) *core.Stub[*box] {
	t.Helper()
	s, err := n.Get(name)
	require.NoError(t, err)
	return s
}

func nop(context.Context, *box) error { return nil }

// put writes one KV row in the box's turn.
func put(ctx context.Context, b *box) error { return b.st.Storage().Put(ctx, "k", []byte("v")) }

// S-T2: every call is counted, per namespace.
func TestMetrics_Calls(t *testing.T) {
	var opts core.Options
	m := withMetrics(t, &opts)
	rt := openRT(t, opts)
	a, b := boxes(t, rt, "a"), boxes(t, rt, "b")
	for range 3 {
		require.NoError(t, core.Do(context.Background(), getBox(t, a, "x"), nop))
	}
	require.NoError(t, core.Do(context.Background(), getBox(t, b, "y"), nop))
	require.EqualValues(t, 3, m.value("durable.calls", "a"))
	require.EqualValues(t, 1, m.value("durable.calls", "b"))
}

// holdGate runs a call on s that holds the gate until release is closed, then sleeps hold (in the
// bubble's clock), and returns its error channel once the call holds the gate.
func holdGate(t *testing.T, s *core.Stub[*box], release chan struct{}, hold time.Duration) chan error {
	t.Helper()
	in := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- core.Do(context.Background(), s, func(context.Context, *box) error {
			close(in)
			<-release
			time.Sleep(hold)
			return nil
		})
	}()
	<-in
	return done
}

// S-T2: the queue length is the calls waiting now; the time in the queue and the turn's duration
// are measured per call.
func TestMetrics_QueueAndTurnDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opts core.Options
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		s := getBox(t, boxes(t, rt, "q"), "x")
		release := make(chan struct{})
		holder := holdGate(t, s, release, 50*time.Millisecond)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { require.NoError(t, core.Do(context.Background(), s, nop)) })
		}
		synctest.Wait()
		require.EqualValues(t, 2, m.value("durable.queue.length", "q"), "two calls wait for the gate")
		close(release)
		require.NoError(t, <-holder)
		wg.Wait()
		require.EqualValues(t, 0, m.value("durable.queue.length", "q"))

		n, sum, maxv := m.hist("durable.queue.time", "q")
		require.EqualValues(t, 3, n)
		require.GreaterOrEqual(t, maxv, 0.050, "the waiters waited for the holder's 50 ms")
		require.GreaterOrEqual(t, sum, 0.100)
		n, _, maxv = m.hist("durable.turn.duration", "q")
		require.EqualValues(t, 3, n)
		require.GreaterOrEqual(t, maxv, 0.050, "the holder's turn took 50 ms")
	})
}

// S-T2: a turn back from an Await waits for the gate while another turn holds it: the gate wait.
func TestMetrics_GateWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opts core.Options
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		s := getBox(t, boxes(t, rt, "g"), "x")
		bIn := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- core.Do(context.Background(), s, func(ctx context.Context, b *box) error {
				return b.st.Await(ctx, func(context.Context) error { <-bIn; return nil })
			})
		}()
		synctest.Wait() // A is inside Await, the gate open
		require.NoError(t, core.Do(context.Background(), s, func(context.Context, *box) error {
			close(bIn) // A's Await is over: it waits for the gate while B sleeps
			time.Sleep(30 * time.Millisecond)
			return nil
		}))
		require.NoError(t, <-done)
		n, sum, _ := m.hist("durable.gate.wait", "g")
		require.EqualValues(t, 1, n)
		require.GreaterOrEqual(t, sum, 0.030)
	})
}

// S-T2: each durable commit is measured, with the turns that share it.
func TestMetrics_CommitLatencyAndTurnsPerCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opts core.Options
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		s := getBox(t, boxes(t, rt, "c"), "x")
		require.NoError(t, core.Do(context.Background(), s, put)) // alone: one commit of one turn
		n, sum, maxv := m.hist("durable.commit.turns", "c")
		require.EqualValues(t, 1, n)
		require.EqualValues(t, 1, sum)
		require.EqualValues(t, 1, maxv)

		// A writer holds the gate while three more queue: the four share one commit.
		release := make(chan struct{})
		in := make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			holder <- core.Do(context.Background(), s, func(ctx context.Context, b *box) error {
				close(in)
				<-release
				return put(ctx, b)
			})
		}()
		<-in
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { require.NoError(t, core.Do(context.Background(), s, put)) })
		}
		synctest.Wait()
		close(release)
		require.NoError(t, <-holder)
		wg.Wait()
		n, sum, maxv = m.hist("durable.commit.turns", "c")
		require.EqualValues(t, 2, n, "two commits in all")
		require.EqualValues(t, 5, sum)
		require.EqualValues(t, 4, maxv, "four turns shared the second")
		n, _, _ = m.hist("durable.commit.latency", "c")
		require.EqualValues(t, 2, n)
		require.EqualValues(t, 2, rt.Stats().Commits)
	})
}

// S-T2: rows read and written count across evictions.
func TestMetrics_RowsReadAndWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := core.Options{IdleTimeout: time.Second}
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		s := getBox(t, boxes(t, rt, "r"), "x")
		require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, b *box) error {
			return b.st.Storage().PutMany(ctx, map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": []byte("3")})
		}))
		read := func(ctx context.Context, b *box) error {
			_, err := b.st.Storage().GetMany(ctx, []string{"a", "b"})
			return err
		}
		require.NoError(t, core.Do(context.Background(), s, read))
		require.EqualValues(t, 3, m.value("durable.rows.written", "r"))
		require.EqualValues(t, 2, m.value("durable.rows.read", "r"))

		time.Sleep(3 * time.Second) // evicted
		synctest.Wait()
		require.EqualValues(t, 0, rt.Stats().Resident)
		require.EqualValues(t, 2, m.value("durable.rows.read", "r"), "an eviction loses no count")
		require.NoError(t, core.Do(context.Background(), s, read))
		require.EqualValues(t, 4, m.value("durable.rows.read", "r"))
		require.EqualValues(t, 3, m.value("durable.rows.written", "r"))
	})
}

// S-T2, S-G: a call to a full queue is refused and counted.
func TestMetrics_Overloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := core.Options{MaxQueue: 1}
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		s := getBox(t, boxes(t, rt, "o"), "x")
		release := make(chan struct{})
		holder := holdGate(t, s, release, 0)
		queued := make(chan error, 1)
		go func() { queued <- core.Do(context.Background(), s, nop) }()
		synctest.Wait()
		err := core.Do(context.Background(), s, nop)
		require.ErrorIs(t, err, core.ErrOverloaded)
		close(release)
		require.NoError(t, <-holder)
		require.NoError(t, <-queued)
		require.EqualValues(t, 1, m.value("durable.overloaded", "o"))
		require.EqualValues(t, 3, m.value("durable.calls", "o"))
	})
}

// failing is an object whose alarm always fails.
type failing struct{ st *core.State }

func (f *failing) Alarm(context.Context, core.AlarmInfo) error { return errors.New("always fails") }

// S-T2, S-T4, S-A5: alarm runs, their retries and their dead letters are counted, with how late
// each run was; the retry and the drop are logged with the object's namespace and name.
func TestMetrics_Alarms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := newLogCapture()
		opts := core.Options{Logger: slog.New(logs), AlarmRetry: core.RetryPolicy{FirstDelay: time.Second, MaxRetries: 1, Jitter: -1}}
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		ns, err := core.Register(rt, "al", func(_ context.Context, st *core.State) (*failing, error) { return &failing{st: st}, nil })
		require.NoError(t, err)
		s, err := ns.Get("x")
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, f *failing) error {
			return f.st.SetAlarm(ctx, time.Now().Add(time.Second))
		}))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 2, m.value("durable.alarms.fired", "al"), "the run and its one retry")
		require.EqualValues(t, 1, m.value("durable.alarms.retried", "al"))
		require.EqualValues(t, 1, m.value("durable.alarms.dead_lettered", "al"))
		n, _, maxv := m.hist("durable.alarms.lateness", "al")
		require.EqualValues(t, 2, n)
		require.Less(t, maxv, 1.0, "each ran within a second of its time")
		_, ok := logs.find("event=alarm_retry namespace=al name=x")
		require.True(t, ok, "the retry is logged: %v", logs.all())
		_, ok = logs.find("event=alarm_dropped")
		require.True(t, ok, "the drop is logged: %v", logs.all())
	})
}

// S-T2, S-T4: resident objects and open databases are gauges; evictions are counted and logged.
func TestMetrics_ResidentOpenAndEvictions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := newLogCapture()
		opts := core.Options{IdleTimeout: time.Second, Logger: slog.New(logs)}
		m := withMetrics(t, &opts)
		rt := coretest.Open(t, opts)
		n := boxes(t, rt, "e")
		require.NoError(t, core.Do(context.Background(), getBox(t, n, "x"), put))
		require.NoError(t, core.Do(context.Background(), getBox(t, n, "y"), nop)) // no database
		require.EqualValues(t, 2, m.value("durable.objects.resident", "e"))
		require.EqualValues(t, 1, m.value("durable.databases.open", "e"))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 0, m.value("durable.objects.resident", "e"))
		require.EqualValues(t, 0, m.value("durable.databases.open", "e"))
		require.EqualValues(t, 2, m.value("durable.evictions", "e"))
		_, ok := logs.find("event=evicted namespace=e name=x reason=idle")
		require.True(t, ok, "the eviction is logged: %v", logs.all())
	})
}

// S-T2, S-T4, S-R10: WebSocket connections are a gauge; messages in and out are counted; a slow
// client's cut is counted and logged.
func TestMetrics_WebSockets(t *testing.T) {
	logs := newLogCapture()
	opts := core.Options{WebSocketSendQueue: 4, Logger: slog.New(logs)}
	m := withMetrics(t, &opts)
	env := openChat(t, opts)
	fast := env.join(t, "r", "fast")
	slow := env.join(t, "r", "slow")
	// A message is counted once it is queued to its client, so a client may read it a moment
	// before the count shows it: wait for the count, with a deadline that only fails a stuck test.
	eventually := func(want int64, name, msg string) {
		t.Helper()
		require.Eventually(t, func() bool { return m.value(name, "chat") == want }, 10*time.Second, time.Millisecond,
			"%s: %s: %d, want %d", msg, name, m.value(name, "chat"), want)
	}
	eventually(2, "durable.websocket.connections", "both joined")
	require.Equal(t, `{"name":"fast"}:hello`, roundTrip(t, fast, "hello"))
	require.Equal(t, `{"name":"fast"}:hello`, recv(t, slow))
	require.EqualValues(t, 1, m.value("durable.websocket.messages.in", "chat"))
	eventually(2, "durable.websocket.messages.out", "the broadcast went to both")
	require.Equal(t, "pong", roundTrip(t, fast, "ping"))
	require.EqualValues(t, 1, m.value("durable.websocket.messages.in", "chat"), "an auto-response wakes nothing")

	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 2000, "the slow client was never cut off")
		roundTrip(t, fast, big)
		if roundTrip(t, fast, "who") == "who:fast" {
			break
		}
	}
	require.Equal(t, "error", env.event(t).kind)
	require.EqualValues(t, 1, m.value("durable.websocket.slow_cuts", "chat"))
	require.EqualValues(t, 1, m.value("durable.websocket.connections", "chat"))
	_, ok := logs.find("event=websocket_slow_cut namespace=chat name=r")
	require.True(t, ok, "the cut is logged: %v", logs.all())
}

// spansByName groups the recorder's ended spans by name.
func spansByName(t *testing.T, rec *tracetest.SpanRecorder) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		out[s.Name()] = append(out[s.Name()], s)
	}
	return out
}

// S-T3: one call with an Await is one span, a child of the caller's, with the queue wait, two
// segments, the Await, the wait for the gate after it and the commit wait under it, in that order.
func TestTrace_CallWithAwait(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rt := openRT(t, core.Options{Tracer: tp})
	s := getBox(t, boxes(t, rt, "tr"), "x")
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, b *box) error {
		if err := put(ctx, b); err != nil {
			return err
		}
		if err := b.st.Await(ctx, func(context.Context) error { return nil }); err != nil {
			return err
		}
		return put(ctx, b)
	}))
	parent.End()

	spans := spansByName(t, rec)
	require.Len(t, spans["durable.call"], 1)
	call := spans["durable.call"][0]
	require.Equal(t, parent.SpanContext().SpanID(), call.Parent().SpanID(), "the call is a child of the caller's span")
	require.Contains(t, call.Attributes(), attribute.String("durable.namespace", "tr"))
	require.Contains(t, call.Attributes(), attribute.String("durable.name", "x"))

	var children []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Parent().SpanID() == call.SpanContext().SpanID() {
			children = append(children, sp)
		}
	}
	var names []string
	for _, c := range children {
		names = append(names, c.Name())
		require.False(t, c.StartTime().Before(call.StartTime()), "%s starts inside the call", c.Name())
		require.False(t, c.EndTime().After(call.EndTime()), "%s ends inside the call", c.Name())
	}
	// The constructor's segment comes first: the object is new.
	require.Equal(t, []string{"durable.queue", "durable.segment", "durable.segment", "durable.await", "durable.gate", "durable.segment", "durable.commit"}, names)
}

// S-T3: an alarm run and a WebSocket delivery are spans, parents of their turn's span.
func TestTrace_AlarmAndWebSocket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		env := openChatPipe(t, core.Options{Tracer: tp})
		c := env.join(t, "room", "ann")
		require.Equal(t, `{"name":"ann"}:hi`, roundTrip(t, c, "hi"))

		ns, err := core.Register(env.rt, "al", func(_ context.Context, st *core.State) (*failing, error) { return &failing{st: st}, nil })
		require.NoError(t, err)
		s, err := ns.Get("x")
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, f *failing) error {
			return f.st.SetAlarm(ctx, time.Now().Add(time.Second))
		}))
		time.Sleep(1500 * time.Millisecond) // the alarm has run (and failed) once
		synctest.Wait()

		spans := spansByName(t, rec)
		childOf := func(parent sdktrace.ReadOnlySpan) bool {
			for _, sp := range spans["durable.call"] {
				if sp.Parent().SpanID() == parent.SpanContext().SpanID() {
					return true
				}
			}
			return false
		}
		require.Len(t, spans["durable.alarm"], 1)
		alarm := spans["durable.alarm"][0]
		require.Contains(t, alarm.Attributes(), attribute.String("durable.namespace", "al"))
		require.Contains(t, alarm.Attributes(), attribute.String("durable.name", "x"))
		require.True(t, childOf(alarm), "the alarm's turn is its child")
		require.Len(t, spans["durable.websocket.message"], 1)
		msg := spans["durable.websocket.message"][0]
		require.Contains(t, msg.Attributes(), attribute.String("durable.name", "room"))
		require.True(t, childOf(msg), "the message's turn is its child")
	})
}

// S-T4: a deadlock the runtime refuses is logged with the object's namespace and name.
func TestLog_DeadlockRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := newLogCapture()
		rt := coretest.Open(t, core.Options{Logger: slog.New(logs)})
		hiddenCycle(t, rt)
		_, ok := logs.find("event=deadlock_refused namespace=peers name=A")
		require.True(t, ok, "the refusal is logged: %v", logs.all())
	})
}

// S-T4, S-O3: a damaged database is logged, naming the object and the file.
func TestLog_Damaged(t *testing.T) {
	dir := emptiedBox(t)
	logs := newLogCapture()
	rt := openRT(t, core.Options{Dir: dir, Logger: slog.New(logs)})
	err := core.Do(context.Background(), getBox(t, boxes(t, rt, "d"), "x"), put)
	require.ErrorIs(t, err, core.ErrDamaged)
	rec, ok := logs.find("event=damaged namespace=d name=x")
	require.True(t, ok, "the damage is logged: %v", logs.all())
	require.Contains(t, rec, "empty (0 bytes)")
}

// S-T1: without a Logger the runtime's records go to slog's default logger:
// a damaged database is never silent.
func TestLog_NilLoggerIsSlogDefault(t *testing.T) {
	dir := emptiedBox(t)
	logs := newLogCapture()
	old := slog.Default()
	slog.SetDefault(slog.New(logs))
	defer slog.SetDefault(old)
	rt := openRT(t, core.Options{Dir: dir})
	err := core.Do(context.Background(), getBox(t, boxes(t, rt, "d"), "x"), put)
	require.ErrorIs(t, err, core.ErrDamaged)
	_, ok := logs.find("event=damaged namespace=d name=x")
	require.True(t, ok, "the damage reaches slog's default logger: %v", logs.all())
}

// emptiedBox returns a directory whose box "x" of namespace "d" was written,
// then had its database truncated to 0 bytes while no runtime held it.
func emptiedBox(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rt, err := core.Open(core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), getBox(t, boxes(t, rt, "d"), "x"), put))
	require.NoError(t, rt.Close())
	files, err := filepath.Glob(filepath.Join(dir, "d", "*.sqlite"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.NoError(t, os.Truncate(files[0], 0))
	return dir
}

// total is the sum of a counter's or a gauge's data points, whatever their attributes (0 if none).
func (m *metrics) total(name string) int64 {
	m.t.Helper()
	var v int64
	switch d := m.collect()[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			v += p.Value
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			v += p.Value
		}
	case nil:
	default:
		m.t.Fatalf("%s is a %T", name, d)
	}
	return v
}

// S-T2, S-CL1, S-CL4, S-CL7: in cluster mode the runtime exports what it shipped (commits, records,
// their bytes before and after compression, snapshots) and its leases: those it holds, and those of
// other nodes it is timing for a takeover.
func TestMetrics_Cluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var m *metrics
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			m = withMetrics(t, o)
			o.Replication.SnapshotEvery = 5
		})
		n2 := openNode(t, c, "n2")
		for i := range 8 {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"))
		}
		require.NoError(t, n1.put("other", "k", "v"))
		require.NoError(t, n2.put("theirs", "k", "v"))
		_, err := n1.get("theirs", "k")
		require.ErrorIs(t, err, core.ErrNotOwner)

		st := n1.rt.Stats().Cluster
		require.GreaterOrEqual(t, st.Commits, int64(9), "one commit per put at least")
		require.Equal(t, st.Commits, m.total("durable.cluster.commits"))
		require.Equal(t, st.Records, m.total("durable.cluster.records"))
		require.GreaterOrEqual(t, m.total("durable.cluster.records"), m.total("durable.cluster.commits"))
		require.Equal(t, st.RecordBytes, m.total("durable.cluster.record_bytes"))
		require.Positive(t, m.total("durable.cluster.record_bytes"))
		require.Greater(t, m.total("durable.cluster.page_bytes"), m.total("durable.cluster.record_bytes"), "pages are compressed")
		require.GreaterOrEqual(t, m.total("durable.cluster.snapshots"), int64(1), "acct's log passed SnapshotEvery")
		require.EqualValues(t, 2, m.total("durable.cluster.leases.held"), "acct and other")
		require.EqualValues(t, 1, m.total("durable.cluster.leases.watched"), "theirs, held by n2")

		require.NoError(t, n1.rt.Close())
		require.NoError(t, n2.rt.Close())
	})
}
