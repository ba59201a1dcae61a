package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// testApp returns the workshop's handler over a fresh runtime. Inside a
// synctest bubble, call it inside the bubble.
func testApp(t *testing.T, opts core.Options) (*app, http.Handler) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	rt := coretest.Open(t, opts)
	a, err := newApp(rt, appConfig{StorePath: filepath.Join(t.TempDir(), "analytics.sqlite"), Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() }) // after the runtime's Close, registered earlier
	return a, a.handler()
}

// do sends a request to h and returns the status and the body.
func do(t *testing.T, h http.Handler, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// get sends GET path, requires 200 and decodes the answer into v.
func get(t *testing.T, h http.Handler, path string, v any) []byte {
	t.Helper()
	code, body := do(t, h, http.MethodGet, path, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return body
}

// keys returns the keys of a JSON object in order.
func keys(t *testing.T, raw []byte) []string {
	t.Helper()
	ks, _, ok := objectFields(raw)
	if !ok {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var out []string
	for _, k := range ks {
		out = append(out, strings.Trim(string(k), `"`))
	}
	return out
}

func TestAPI_OriginalSessionShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := testApp(t, core.Options{})
		get(t, h, "/reset", nil)

		body := get(t, h, "/armtwice", nil)
		if got, want := strings.Join(keys(t, body), ","), "first,afterFirst,second,afterSecond,afterDelete,overwritten"; got != want {
			t.Errorf("/armtwice keys: got %s, want %s", got, want)
		}
		var at struct {
			First, Second, AfterFirst, AfterSecond int64
			AfterDelete                            *int64
			Overwritten                            bool
		}
		json.Unmarshal(body, &at)
		if at.AfterFirst != at.First || at.AfterSecond != at.Second || at.Second-at.First != 30_000 || at.AfterDelete != nil || !at.Overwritten {
			t.Errorf("/armtwice: got %s", body)
		}

		body = get(t, h, "/deleteall?o=da", nil)
		if got, want := strings.Join(keys(t, body), ","), "alarmBefore,alarmAfter,cleared"; got != want {
			t.Errorf("/deleteall keys: got %s, want %s", got, want)
		}
		if !bytes.Contains(body, []byte(`"alarmAfter": null`)) || !bytes.Contains(body, []byte(`"cleared": true`)) {
			t.Errorf("/deleteall: got %s", body)
		}
		// The object goes on working after DeleteAll dropped its tables.
		get(t, h, "/hit?o=da&n=1", nil)

		var hits hitResults
		get(t, h, "/hit?n=5", &hits)
		if len(hits.Results) != 5 || !hits.Results[0].ArmedNew {
			t.Fatalf("/hit?n=5: got %+v", hits)
		}
		for i, r := range hits.Results[1:] {
			if r.ArmedNew || r.AlarmAt != hits.Results[0].AlarmAt {
				t.Errorf("hit %d: got %+v, want armedNew false at %d", i+2, r, hits.Results[0].AlarmAt)
			}
		}
		if got, want := hits.Results[0].AlarmAt-time.Now().UnixMilli(), int64(2000); got != want {
			t.Errorf("the debounce alarm is %d ms away, want %d", got, want)
		}

		time.Sleep(4 * time.Second)
		synctest.Wait()
		body = get(t, h, "/state", nil)
		if got, want := strings.Join(keys(t, body), ","), "alarm,pending,events"; got != want {
			t.Errorf("/state keys: got %s, want %s", got, want)
		}
		var st LabState
		json.Unmarshal(body, &st)
		if got, want := describeState(st), `alarm=null pending=0 events=[alarm "retryCount=0 isRetry=false mode=ok", flush "n=5"]`; got != want {
			t.Errorf("/state: got %s, want %s", got, want)
		}
		for _, e := range st.Events {
			if e.At == 0 {
				t.Errorf("event %+v has no time", e)
			}
		}
	})
}

// The lab takes its times from the runtime's clock (State.Now): with
// Options.Now an hour ahead, the debounce is still 2 s away on that clock,
// and the flush runs 2 s later, not at once.
func TestAPI_LabKeepsTheRuntimesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ahead := func() time.Time { return time.Now().Add(time.Hour) }
		_, h := testApp(t, core.Options{Now: ahead})
		get(t, h, "/reset", nil)
		var hits hitResults
		get(t, h, "/hit?n=1", &hits)
		if got, want := hits.Results[0].AlarmAt-ahead().UnixMilli(), int64(2000); got != want {
			t.Errorf("the debounce alarm is %d ms away on the runtime's clock, want %d", got, want)
		}
		synctest.Wait()
		var st LabState
		get(t, h, "/state", &st)
		if st.Alarm == nil || st.Pending != 1 {
			t.Fatalf("before the debounce: got alarm %v, pending %d; want an alarm and 1", st.Alarm, st.Pending)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		get(t, h, "/state", &st)
		if got, want := describeState(st), `alarm=null pending=0 events=[alarm "retryCount=0 isRetry=false mode=ok", flush "n=1"]`; got != want {
			t.Errorf("after the debounce: got %s, want %s", got, want)
		}
		if got, want := st.Events[len(st.Events)-1].At, ahead().UnixMilli(); got != want {
			t.Errorf("the flush is logged at %d, want %d (the runtime's clock)", got, want)
		}
	})
}

// The original's retry run, then the dead letter this runtime keeps and
// re-arms.
func TestAPI_RetriesEndInADeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := testApp(t, core.Options{AlarmRetry: core.RetryPolicy{Jitter: -1}})
		get(t, h, "/reset?o=fail", nil)
		get(t, h, "/mode?o=fail&m=throw", nil)
		get(t, h, "/arm?o=fail&ms=500", nil)
		for _, step := range []struct {
			after    time.Duration
			attempts int
			pending  bool
		}{
			{20 * time.Second, 4, true},
			{20 * time.Second, 5, true},
			{40 * time.Second, 6, true},
			{60 * time.Second, 7, false},
			{60 * time.Second, 7, false},
		} {
			time.Sleep(step.after)
			synctest.Wait()
			var st LabState
			get(t, h, "/state?o=fail", &st)
			if len(st.Events) != step.attempts || (st.Alarm != nil) != step.pending {
				t.Errorf("got attempts=%d pending=%t, want %d %t", len(st.Events), st.Alarm != nil, step.attempts, step.pending)
			}
		}
		var tl LabState
		get(t, h, "/state?o=fail&timeline=1", &tl)
		if last := tl.Timeline[len(tl.Timeline)-1]; last.Kind != "drop" {
			t.Errorf("the timeline ends with %+v, want a drop", last)
		}

		var dls struct{ DeadLetters []deadLetter }
		get(t, h, "/deadletters", &dls)
		if len(dls.DeadLetters) != 1 || dls.DeadLetters[0].Attempts != 7 || dls.DeadLetters[0].Name != "fail" {
			t.Fatalf("/deadletters: got %+v, want one of 7 attempts", dls)
		}
		get(t, h, "/mode?o=fail&m=ok", nil)
		code, body := do(t, h, http.MethodPost, "/deadletters/rearm", strings.NewReader("seq=1"))
		if code != http.StatusOK {
			t.Fatalf("rearm: %d %s", code, body)
		}
		synctest.Wait()
		var st LabState
		get(t, h, "/state?o=fail", &st)
		if got, want := st.Events[len(st.Events)-1].Note, "retryCount=0 isRetry=false mode=ok"; got != want || st.Alarm != nil {
			t.Errorf("after the re-arm: last run %q, alarm %v; want %q and none", got, st.Alarm, want)
		}
		get(t, h, "/deadletters", &dls)
		if len(dls.DeadLetters) != 0 {
			t.Errorf("dead letters after the re-arm: %+v", dls.DeadLetters)
		}
	})
}

func TestAPI_Patterns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, h := testApp(t, core.Options{})

		var lim limitResult
		get(t, h, "/limit?key=k&n=7", &lim)
		if lim.Allowed != 5 || lim.Refused != 2 || lim.Limit != 5 || lim.Window != "1m0s" {
			t.Errorf("/limit: got %+v, want 5 allowed, 2 refused of 5 per 1m0s", lim)
		}

		var race raceResult
		get(t, h, "/inventory/race?n=50&await=1ms", &race)
		if race.Safe.Succeeded != 50 || race.Safe.Stock != 0 || race.Safe.Lost != 0 {
			t.Errorf("safe side: got %+v, want 50 succeeded, stock 0, lost 0", race.Safe)
		}
		if race.Racy.Lost == 0 {
			t.Errorf("racy side: got %+v, want lost updates", race.Racy)
		}
		get(t, h, "/inventory/race?n=10&await=2ms", &race) // a second race restocks the items
		if race.Safe.Stock != 0 || race.Safe.Succeeded != 10 {
			t.Errorf("second race, safe side: got %+v", race.Safe)
		}

		var s sessionAnswer
		get(t, h, "/session/touch?id=s1&key=user&value=ada", &s)
		if s.Deadline == nil || *s.Value != "ada" {
			t.Errorf("/session/touch: got %+v", s)
		}
		get(t, h, "/session/get?id=s1&key=user", &s)
		if *s.Value != "ada" {
			t.Errorf("/session/get: got %+v", s)
		}
		if code, body := do(t, h, http.MethodGet, "/session/get?id=s1&key=nope", nil); code != http.StatusNotFound {
			t.Errorf("/session/get of a missing key: %d %s, want 404", code, body)
		}
		get(t, h, "/session/end?id=s1", nil)
		if code, _ := do(t, h, http.MethodGet, "/session/get?id=s1&key=user", nil); code != http.StatusNotFound {
			t.Errorf("/session/get after /session/end: %d, want 404", code)
		}

		var c counterAnswer
		get(t, h, "/counter/record?link=l1&n=5", &c)
		if c.Total != 5 || c.FlushAt == nil {
			t.Errorf("/counter/record: got %+v, want total 5 and a flush pending", c)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		get(t, h, "/counter/stats?link=l1", &c)
		if c.FlushAt != nil || len(c.Flushed) == 0 {
			t.Fatalf("/counter/stats: got %+v, want flushed", c)
		}
		var sum int64
		for _, b := range c.Flushed {
			sum += b.Count
		}
		if sum != 5 {
			t.Errorf("the store holds %d hits, want 5", sum)
		}

		var routes struct{ Routes []map[string]string }
		get(t, h, "/routes", &routes)
		if len(routes.Routes) < 15 {
			t.Errorf("/routes lists %d routes", len(routes.Routes))
		}
	})
}

func TestAPI_BadInput(t *testing.T) {
	_, h := testApp(t, core.Options{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string // in the error message
	}{
		{"GET", "/nope", "", 404, "no route GET /nope"},
		{"GET", "/room", "", 404, "no route"},
		{"POST", "/hit", "", 405, "/hit takes GET, not POST"},
		{"GET", "/deadletters/rearm?seq=1", "", 405, "takes POST"},
		{"GET", "/hit?n=x", "", 400, `bad parameter n: want an integer from 1 to 1000, got "x"`},
		{"GET", "/hit?n=0", "", 400, "bad parameter n"},
		{"GET", "/hit?n=1001", "", 400, "bad parameter n"},
		{"GET", "/arm?ms=-5", "", 400, "bad parameter ms"},
		{"GET", "/mode?m=sometimes", "", 400, `bad parameter m: want ok, throw or flaky, got "sometimes"`},
		{"GET", "/mode", "", 400, "bad parameter m"},
		{"GET", "/state?o=", "", 400, "bad parameter o"},
		{"GET", "/state?o=" + strings.Repeat("x", core.MaxNameLen+1), "", 400, "bad parameter o"},
		{"GET", "/state?timeline=maybe", "", 400, "bad parameter timeline"},
		{"GET", "/limit?window=forever", "", 400, "bad parameter window"},
		{"GET", "/limit?limit=0", "", 400, "bad parameter limit"},
		{"GET", "/inventory/race?await=1500us", "", 400, "bad parameter await"},
		{"GET", "/inventory/race?await=1s", "", 400, "bad parameter await"},
		{"GET", "/inventory/race?n=5000", "", 400, "bad parameter n"},
		{"GET", "/session/touch", "", 400, "bad parameter id"},
		{"GET", "/session/get?id=s", "", 400, "bad parameter key"},
		{"POST", "/deadletters/rearm", "", 400, "bad parameter seq"},
		{"POST", "/deadletters/rearm", "seq=42", 404, "no dead letter 42"},
		{"POST", "/deadletters/rearm", "seq=1&x=" + strings.Repeat("a", maxBody), 413, "over the limit"},
		{"GET", "/hit?n=%zz", "", 400, "bad form"},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		code, got := do(t, h, tc.method, tc.path, body)
		var e errorBody
		if err := json.Unmarshal(got, &e); err != nil {
			t.Errorf("%s %s: answer is not JSON: %s", tc.method, tc.path, got)
			continue
		}
		if code != tc.status || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s: got %d %q, want %d with %q", tc.method, tc.path, code, e.Error, tc.status, tc.want)
		}
	}
}

// What a newcomer finds by looking: every route in /routes, JSON errors
// everywhere (rooms included), one layout, no HTML escapes, HEAD like GET.
func TestAPI_Discoverable(t *testing.T) {
	_, h := testApp(t, core.Options{})

	code, body := do(t, h, http.MethodGet, "/routes", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /routes: %d %s", code, body)
	}
	var routes struct{ Routes []map[string]string }
	if err := json.Unmarshal(body, &routes); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, r := range routes.Routes {
		paths[r["path"]] = true
	}
	for _, want := range []string{"/", "/room/{name}", "/routes", "/limit", "/deadletters/rearm"} {
		if !paths[want] {
			t.Errorf("/routes lacks %s", want)
		}
	}
	if !bytes.Contains(body, []byte("(?o=&n=5)")) || bytes.Contains(body, []byte(`\u0026`)) {
		t.Errorf("/routes escapes &: %s", body)
	}

	// A room's state is laid out as every other answer.
	code, body = do(t, h, http.MethodGet, "/room/lobby", nil)
	if want := "{\n  \"offset\": 0,\n  \"members\": []\n}\n"; code != http.StatusOK || string(body) != want {
		t.Errorf("GET /room/lobby: got %d %q, want 200 %q", code, body, want)
	}

	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/room/", 404, "a room is /room/{name}"},
		{"GET", "/room/a/b", 404, "a room is /room/{name}"},
		{"POST", "/room/lobby", 405, "/room/{name} takes GET, not POST"},
		{"POST", "/", 405, "/ takes GET, not POST"},
		{"GET", "/room/" + strings.Repeat("x", core.MaxNameLen+1), 400, "bad room name"},
	} {
		code, body := do(t, h, tc.method, tc.path, nil)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || code != tc.status || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s: got %d %s, want %d JSON with %q", tc.method, tc.path, code, body, tc.status, tc.want)
		}
		if len(body) > 400 {
			t.Errorf("%s %.40s...: an error of %d bytes echoes too much", tc.method, tc.path, len(body))
		}
	}

	// A WebSocket handshake's errors are JSON too: the room's (a bad name)
	// and gorilla's (a version it does not speak), status and headers kept.
	for _, tc := range []struct {
		path, version string
		status        int
		want          string
	}{
		{"/room/lobby", "13", 400, "name must be 1 to"},
		{"/room/lobby?name=ann&since=x", "13", 400, "since must be an offset"},
		{"/room/lobby?name=ann", "8", 400, "WebSocket handshake refused: Bad Request (an upgrade needs"},
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, tc.path, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", tc.version)
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e errorBody
		err := json.Unmarshal(rec.Body.Bytes(), &e)
		if err != nil || rec.Code != tc.status || !strings.Contains(e.Error, tc.want) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("upgrade %s: got %d %s %q, want %d JSON with %q", tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes(), tc.status, tc.want)
		}
	}

	// HEAD is GET without the body.
	for _, path := range []string{"/", "/routes", "/state?o=head", "/room/lobby"} {
		get, _ := do(t, h, http.MethodGet, path, nil)
		code, body := do(t, h, http.MethodHead, path, nil)
		if code != get || len(body) != 0 {
			t.Errorf("HEAD %s: got %d with %d bytes, want %d with none", path, code, len(body), get)
		}
	}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodHead, "/deadletters/rearm", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Errorf("HEAD of a POST route: got %d, Allow %q; want 405, Allow POST", rec.Code, rec.Header().Get("Allow"))
	}
	req = httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/hit", nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
		t.Errorf("POST /hit: Allow %q, want \"GET, HEAD\"", got)
	}
}

// Error messages give an example that is in range, and never echo a huge
// value back whole.
func TestAPI_Messages(t *testing.T) {
	_, h := testApp(t, core.Options{})
	for _, tc := range []struct {
		path string
		want string
	}{
		{"/inventory/race?await=abc", `bad parameter await: want a duration from 1ms to 50ms, like 1ms or 50ms, got "abc"`},
		{"/limit?window=0s", `want a duration from 1ms to 24h, like 1ms or 24h, got "0s"`},
		{"/state?o=" + strings.Repeat("x", 5000), `got "` + strings.Repeat("x", maxEcho) + `"... (5000 bytes)`},
		{"/session/get?id=s&key=" + strings.Repeat("é", 3000), `"... (6000 bytes)`},
	} {
		_, body := do(t, h, http.MethodGet, tc.path, nil)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("GET %.40s: not JSON: %s", tc.path, body)
		}
		if !strings.Contains(e.Error, tc.want) || len(e.Error) > 300 {
			t.Errorf("GET %.40s...: got %q, want %q in at most 300 bytes", tc.path, e.Error, tc.want)
		}
	}
}

func TestWithLimits_PanicIsA500(t *testing.T) {
	var logs bytes.Buffer
	h := withLimits(slog.New(slog.NewTextHandler(&logs, nil)), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	code, body := do(t, h, http.MethodGet, "/", nil)
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusInternalServerError {
		t.Errorf("got %d %s, want a 500 JSON error", code, body)
	}
	if !strings.Contains(logs.String(), "event=panic") || !strings.Contains(logs.String(), "boom") {
		t.Errorf("the panic was not logged: %s", logs.String())
	}
}

func TestPage_IsServedAtTheRoot(t *testing.T) {
	_, h := testApp(t, core.Options{})
	code, body := do(t, h, http.MethodGet, "/", nil)
	if code != http.StatusOK || !bytes.Contains(body, []byte("<title>durable")) {
		t.Fatalf("GET /: %d, %.80s", code, body)
	}
	for _, external := range []string{"http://", "https://", "//cdn"} {
		for _, line := range strings.Split(string(body), "\n") {
			if strings.Contains(line, external) && !strings.Contains(line, "http://www.w3.org/2000/svg") {
				t.Errorf("the page refers to something external: %s", strings.TrimSpace(line))
			}
		}
	}
}

func TestOrigJSON_LaysOutLikeTheOriginal(t *testing.T) {
	got, err := origJSON(hitResults{Results: []HitResult{{true, 1}, {false, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "results": [
    {"armedNew": true, "alarmAt": 1},
    {"armedNew": false, "alarmAt": 1}
  ]
}`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	got, _ = origJSON(map[string]any{})
	if string(got) != "{}" {
		t.Errorf("empty object: got %s", got)
	}
	got, _ = origJSON([]int{1, 2})
	if string(got) != "[1, 2]" {
		t.Errorf("array: got %s", got)
	}
}
