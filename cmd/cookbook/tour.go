package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/durable-go/durable/core"
)

// The tour runs every experiment of the original hands-on sessions in-process and compares
// what it sees with what was measured on the original runtime. It
// runs on a fast clock: every duration of the original hands-on sessions (the 2 s debounce, the
// 2 s ... 64 s retry ladder with its 0-25 % jitter, the 10 s before an idle
// object is evicted, the waits between curls) is divided by Scale, and
// times are printed back in the original's units.
//
// Each row gets one of three verdicts, from what the tour observed: the
// same as the original; differs, on purpose, with the reason; or better,
// where this runtime goes further (it keeps what the original loses). A
// row whose observation is neither the original's behaviour nor this
// runtime's documented one is unexpected, and fails the tour.

// tourOptions configure the tour.
type tourOptions struct {
	Scale float64 // how many times faster than the original runtime's clock (20: the 126 s ladder takes 6.3 s)
}

// A tourRow is one line of the tour's final table.
type tourRow struct {
	Experiment string
	Original   string // what the original runtime showed
	Here       string // what this runtime showed
	Verdict    verdict
	Why        string // for differs and better: the reason, or what it adds
}

// verdict compares what this runtime showed with what the original did.
type verdict string

const (
	same       verdict = "same"       // what the original showed
	differs    verdict = "differs"    // on purpose: Why says why
	better     verdict = "better"     // goes further than the original: Why says how
	unexpected verdict = "UNEXPECTED" // neither the original's behaviour nor this runtime's own
)

// judge gives a row its verdict from what was observed: same when here is
// what the original showed (asOriginal); else v, with why, when it is what
// this runtime is documented to do (asDesigned); else unexpected.
func judge(experiment, original, here string, asOriginal, asDesigned bool, v verdict, why string) tourRow {
	r := tourRow{Experiment: experiment, Original: original, Here: here}
	switch {
	case asOriginal:
		r.Verdict = same
	case asDesigned:
		r.Verdict, r.Why = v, why
	default:
		r.Verdict = unexpected
	}
	return r
}

// sameRow is a row whose only expected outcome is the original's.
func sameRow(experiment, original, here string, ok bool) tourRow {
	return judge(experiment, original, here, ok, false, "", "")
}

// tourCommand is `cookbook tour`.
func tourCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cookbook tour", flag.ContinueOnError)
	scale := fs.Float64("scale", 20, "how many times faster than the original runtime's clock to run (1 to 200)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *scale < 1 || *scale > 200 {
		return fmt.Errorf("tour: -scale %v: want 1 to 200", *scale)
	}
	rows, err := runTour(ctx, stdout, tourOptions{Scale: *scale})
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range rows {
		if r.Verdict == unexpected {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("tour: %d of %d results are unexpected: neither the original's behaviour nor this runtime's", bad, len(rows))
	}
	return nil
}

// tour is the state of one run.
type tour struct {
	ctx   context.Context
	out   io.Writer
	scale float64
	rt    *core.Runtime
	app   *app
	h     http.Handler

	probes atomic.Int64 // constructor runs of the eviction experiment's object
}

// experiment is one experiment of the original hands-on sessions; it prints its transcript and
// returns its rows.
type experiment struct {
	title string
	ref   string
	run   func(t *tour) ([]tourRow, error)
}

// origTime converts a duration of the original hands-on sessions into the tour's clock.
func (t *tour) origTime(d time.Duration) time.Duration { return time.Duration(float64(d) / t.scale) }

// origSecs converts a duration measured here into seconds of the original hands-on sessions.
func (t *tour) origSecs(d time.Duration) float64 { return d.Seconds() * t.scale }

// runTour runs every experiment, printing the transcripts and the final
// table to w, and returns the table. It fails only if the runtime cannot
// be set up; an experiment that fails is a row that does not match.
func runTour(ctx context.Context, w io.Writer, opts tourOptions) ([]tourRow, error) {
	if opts.Scale <= 0 {
		opts.Scale = 20
	}
	out := &lockedWriter{w: w}
	t := &tour{ctx: ctx, out: out, scale: opts.Scale}
	quiet := slog.New(slog.DiscardHandler)
	metrics, err := newMetricsEndpoint()
	if err != nil {
		return nil, err
	}
	defer metrics.Close()
	rt, err := core.Open(core.Options{
		Meter: metrics.provider,
		// The default jitter of 0-25 %, as on the original (W2).
		AlarmRetry:  core.RetryPolicy{FirstDelay: t.origTime(2 * time.Second)},
		IdleTimeout: t.origTime(10 * time.Second), // the original's ~10 s before hibernation
		Logger:      quiet,
		OnAlarmDropped: func(dl core.DeadLetter) {
			fmt.Fprintf(out, "  [runtime] event=alarm_dropped seq=%d object=%s/%s attempts=%d error=%q\n", dl.Seq, dl.Namespace, dl.Name, dl.Attempts, dl.LastError)
		},
	})
	if err != nil {
		return nil, err
	}
	storeDir, err := os.MkdirTemp("", "cookbook-tour-")
	if err != nil {
		return nil, errors.Join(err, rt.Close())
	}
	defer os.RemoveAll(storeDir)
	a, err := newApp(rt, appConfig{
		Debounce:   t.origTime(2 * time.Second),
		SessionTTL: t.origTime(30 * time.Second),
		FlushAfter: t.origTime(30 * time.Second),
		StorePath:  filepath.Join(storeDir, "analytics.sqlite"),
		Logger:     quiet,
	})
	if err != nil {
		return nil, errors.Join(err, rt.Close())
	}
	t.rt, t.app, t.h = rt, a, a.handler()

	fmt.Fprintf(out, "The tour: every experiment of the original hands-on sessions, in-process, %g times faster than the original runtime's clock\n", t.scale)
	fmt.Fprintf(out, "(alarm retries after %v, %v, ..., each plus 0-25 %% jitter; times below are in the original runtime's seconds).\n",
		t.origTime(2*time.Second), t.origTime(4*time.Second))
	exps := experiments()
	var rows []tourRow
	for i, e := range exps {
		fmt.Fprintf(out, "\n== [%d/%d] %s (%s)\n", i+1, len(exps), e.title, e.ref)
		start := time.Now()
		got, err := e.run(t)
		if err != nil {
			fmt.Fprintf(out, "  error: %v\n", err)
			got = append(got, tourRow{Experiment: e.title, Original: "-", Here: "error: " + err.Error(), Verdict: unexpected})
		}
		var verdicts []string
		for _, r := range got {
			v := string(r.Verdict)
			if r.Why != "" {
				v += " (" + r.Why + ")"
			}
			verdicts = append(verdicts, v)
		}
		fmt.Fprintf(out, "-> %s (%.1f s)\n", strings.Join(verdicts, "; "), time.Since(start).Seconds())
		rows = append(rows, got...)
	}
	fmt.Fprintf(out, "\n== Telemetry: the runtime's metrics, as the server's /metrics serves them (total, then per namespace)\n")
	merr := metrics.summary(out)
	cerr := errors.Join(merr, rt.Close(), a.Close())

	fmt.Fprintf(out, "\n== Summary\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\texperiment\toriginal runtime\there\tverdict")
	count := map[verdict]int{}
	var whys []string
	for i, r := range rows {
		count[r.Verdict]++
		v := string(r.Verdict)
		if r.Why != "" {
			v += fmt.Sprintf(" [%d]", len(whys)+1)
			whys = append(whys, r.Why)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, r.Experiment, r.Original, r.Here, v)
	}
	tw.Flush()
	for i, w := range whys {
		fmt.Fprintf(out, "[%d] %s\n", i+1, w)
	}
	fmt.Fprintf(out, "%d rows: %d the same as the original, %d differ on purpose, %d better; %d unexpected.\n",
		len(rows), count[same], count[differs], count[better], count[unexpected])
	return rows, cerr
}

func experiments() []experiment {
	return []experiment{
		{"one alarm per object: setAlarm overwrites", "the original, A1 A2", (*tour).armTwice},
		{"deleteAll() deletes the alarm too", "the original, A6", (*tour).deleteAll},
		{"debounce: five hits, one alarm, one flush", "the original, A4", (*tour).debounce},
		{"a handler that always throws: 7 runs, then gone", "the original, A5", (*tour).ladder},
		{"setAlarm(now+500ms); alarm() throws twice", "the original, A3 A5 A13", (*tour).flaky},
		{"an evicted object is woken by its alarm", "the original, A7 A8", (*tour).wake},
		{"coordinator: 50 concurrent reserves", "the original, C1 C2", (*tour).coordinator},
		{"rate limiter: 5 per 60 s, 7 calls", "the original, L1", (*tour).limiter},
		{"room: two WebSocket clients, hello, ping", "the original, R3 R4 R10", (*tour).room},
		{"LinkCounter: a retried flush writes absolute counts", "the original, K2 K3", (*tour).counter},
		{"session: the alarm deletes the data at the deadline", "the original, SE1", (*tour).session},
		{"facets: a child object's alarm, owned by its parent", "the original, F2 F3", (*tour).facet},
		{"an object with only WebSockets is evicted after ~10 s idle", "measured, W11", (*tour).eviction},
		{"the attachment limit", "measured, W12", (*tour).attachment},
	}
}

// curl runs GET path against the app as the original's curl lines do, prints
// the exchange, and decodes the answer into v (if not nil).
func (t *tour) curl(path string, v any) error { return t.request(http.MethodGet, path, v) }

// request is curl for any method.
func (t *tour) request(method, path string, v any) error {
	flag := ""
	if method != http.MethodGet {
		flag = " -X " + method
	}
	fmt.Fprintf(t.out, "$ curl -s%s \"localhost:8787%s\"\n", flag, path)
	req := httptest.NewRequestWithContext(t.ctx, method, path, nil)
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	t.out.Write(rec.Body.Bytes())
	if rec.Code != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(rec.Body.Bytes(), v)
}

// sleep waits d of the original hands-on sessions' time, saying so as the original's transcript does.
func (t *tour) sleep(d time.Duration) {
	fmt.Fprintf(t.out, "$ sleep %g   # %v here\n", d.Seconds(), t.origTime(d))
	time.Sleep(t.origTime(d))
}

func msOrNull(p *int64, name string, ref int64) string {
	switch {
	case p == nil:
		return "null"
	case *p == ref:
		return name
	}
	return fmt.Sprint(*p)
}

// lockedWriter serializes writes: the runtime's hooks print from its own
// goroutines.
type lockedWriter struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
