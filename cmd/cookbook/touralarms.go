package main

// The tour's alarm experiments: the original's hands-on session, and original
// 003's local measurements.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/durable-go/durable/core"
)

// the original: one alarm per object.
func (t *tour) armTwice() ([]tourRow, error) {
	if err := t.curl("/reset", nil); err != nil {
		return nil, err
	}
	var r ArmTwice
	if err := t.curl("/armtwice", &r); err != nil {
		return nil, err
	}
	here := fmt.Sprintf("overwritten=%t afterDelete=%s", r.Overwritten, msOrNull(r.AfterDelete, "", 0))
	original := "overwritten=true afterDelete=null"
	exact := msOrNull(r.AfterFirst, "first", r.First) == "first" && msOrNull(r.AfterSecond, "second", r.Second) == "second"
	return []tourRow{{"/armtwice: set +30 s, +60 s, delete", original, here, here == original && exact && r.Second-r.First == 30_000}}, nil
}

// the original: deleteAll() takes the alarm with it.
func (t *tour) deleteAll() ([]tourRow, error) {
	var r DeleteAllResult
	if err := t.curl("/deleteall?o=da", &r); err != nil {
		return nil, err
	}
	before := "null"
	if r.AlarmBefore != nil {
		before = "set"
	}
	here := fmt.Sprintf("alarmBefore=%s alarmAfter=%s cleared=%t", before, msOrNull(r.AlarmAfter, "", 0), r.Cleared)
	original := "alarmBefore=set alarmAfter=null cleared=true"
	return []tourRow{{"/deleteall with an alarm pending", original, here, here == original}}, nil
}

// the original: the debounce.
func (t *tour) debounce() ([]tourRow, error) {
	var hits hitResults
	if err := t.curl("/hit?n=5", &hits); err != nil {
		return nil, err
	}
	var armed []string
	same := true
	for _, h := range hits.Results {
		armed = append(armed, map[bool]string{true: "T", false: "F"}[h.ArmedNew])
		same = same && h.AlarmAt == hits.Results[0].AlarmAt
	}
	hereHits := "armedNew " + strings.Join(armed, ",")
	if same {
		hereHits += "; one alarmAt"
	}
	origHits := "armedNew T,F,F,F,F; one alarmAt"

	t.sleep(4 * time.Second)
	var st LabState
	if err := t.curl("/state", &st); err != nil {
		return nil, err
	}
	want := `alarm=null pending=0 events=[alarm "retryCount=0 isRetry=false mode=ok", flush "n=5"]`
	ok := describeState(st) == want
	hereState := fmt.Sprintf("alarm=%s pending=%d, %d events", msOrNull(st.Alarm, "", 0), st.Pending, len(st.Events))
	if ok {
		hereState = "alarm=null pending=0; one run, one flush n=5"
	}
	return []tourRow{
		{"/hit?n=5: arm only if none pending", origHits, hereHits, hereHits == origHits},
		{"/state 4 s later", "alarm=null pending=0; one run, one flush n=5", hereState, ok},
	}, nil
}

func describeState(st LabState) string {
	var evs []string
	for _, e := range st.Events {
		evs = append(evs, fmt.Sprintf("%s %q", e.Kind, e.Note))
	}
	return fmt.Sprintf("alarm=%s pending=%d events=[%s]", msOrNull(st.Alarm, "", 0), st.Pending, strings.Join(evs, ", "))
}

// the original: the retry ladder of a handler that always throws, watched
// every 20 s (the original's watch), then the dead letter this runtime keeps.
func (t *tour) ladder() ([]tourRow, error) {
	for _, p := range []string{"/reset?o=fail", "/mode?o=fail&m=throw"} {
		if err := t.curl(p, nil); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := t.curl(fmt.Sprintf("/arm?o=fail&ms=%d", t.origTime(500*time.Millisecond).Milliseconds()), nil); err != nil {
		return nil, err
	}
	fmt.Fprintf(t.out, "$ watch -n 20 \"curl -s '$B/state?o=fail' | jq '[.alarm, (.events|length)]'\"   # every %v here\n", t.origTime(20*time.Second))
	var attempts, pending []string
	for _, at := range []int{20, 40, 80, 140, 200} {
		time.Sleep(time.Until(start.Add(t.origTime(time.Duration(at) * time.Second))))
		st, err := t.state("fail")
		if err != nil {
			return nil, err
		}
		n := len(st.Events)
		p := "False"
		if st.Alarm != nil {
			p = "True"
		}
		fmt.Fprintf(t.out, "t+%ds:%s attempts=%d  alarmPending=%-5s  [retryCount=0..%d]\n", at, strings.Repeat(" ", 4-len(fmt.Sprint(at))), n, p, n-1)
		attempts, pending = append(attempts, fmt.Sprint(n)), append(pending, p[:1])
	}
	here := "attempts " + strings.Join(attempts, ",") + "; pending " + strings.Join(pending, ",")
	original := "attempts 4,5,6,7,7; pending T,T,T,F,F"
	match := here == original

	// Beyond the original: the alarm is not lost.
	fmt.Fprintln(t.out, "# the original drops it silently; here it is in the dead-letter table:")
	var dls struct{ DeadLetters []deadLetter }
	if err := t.curl("/deadletters?o=fail", &dls); err != nil {
		return nil, err
	}
	if len(dls.DeadLetters) == 0 {
		return []tourRow{{"handler always throws, watched", original, here + "; no dead letter", false}}, nil
	}
	dl := dls.DeadLetters[len(dls.DeadLetters)-1]
	fmt.Fprintln(t.out, "# the service is back: switch the handler to ok and re-arm the dead letter")
	if err := t.curl("/mode?o=fail&m=ok", nil); err != nil {
		return nil, err
	}
	if err := t.request(http.MethodPost, fmt.Sprintf("/deadletters/rearm?seq=%d", dl.Seq), nil); err != nil {
		return nil, err
	}
	time.Sleep(t.origTime(time.Second))
	st, err := t.state("fail")
	if err != nil {
		return nil, err
	}
	last := st.Events[len(st.Events)-1]
	fmt.Fprintf(t.out, "after the re-arm: %s %q, alarm=%s\n", last.Kind, last.Note, msOrNull(st.Alarm, "", 0))
	rearmed := last.Note == "retryCount=0 isRetry=false mode=ok" && st.Alarm == nil
	after := fmt.Sprintf("gone; dead letter #%d kept", dl.Seq)
	if rearmed {
		after += ", re-armed"
	}
	// A deliberate difference: the row checks that the alarm is gone from
	// the object as in the original, and kept where it can be re-armed.
	return []tourRow{
		{"handler always throws, watched", original, here, match},
		{"after the 7th run", "gone, silently: no dead letter", after, match && rearmed && dl.Attempts == 7},
	}, nil
}

// state reads the lab object o's state, with its timeline, without
// printing it.
func (t *tour) state(o string) (LabState, error) {
	stub, err := t.app.labs.Get(o)
	if err != nil {
		return LabState{}, err
	}
	return core.Call(t.ctx, stub, func(ctx context.Context, l *Lab) (LabState, error) { return l.State(ctx, true) })
}

// the original: setAlarm(now+500ms) fires after about half a second with
// retryCount 0; a handler that throws twice is retried after about 2 s,
// then 4 to 5 s, with retryCount 1, 2 and isRetry true; getAlarm() is
// null while alarm() runs.
func (t *tour) flaky() ([]tourRow, error) {
	for _, p := range []string{"/reset?o=flaky", "/mode?o=flaky&m=flaky"} {
		if err := t.curl(p, nil); err != nil {
			return nil, err
		}
	}
	if err := t.curl(fmt.Sprintf("/arm?o=flaky&ms=%d", t.origTime(500*time.Millisecond).Milliseconds()), nil); err != nil {
		return nil, err
	}
	t.sleep(10 * time.Second)
	st, err := t.state("flaky")
	if err != nil {
		return nil, err
	}
	var runs []LabEvent
	var armAt int64
	for _, e := range st.Timeline {
		switch e.Kind {
		case "alarm":
			runs = append(runs, e)
		case "arm":
			armAt = e.At
		}
	}
	for _, e := range runs {
		fmt.Fprintf(t.out, "  +%5.2f s  %s  (%s)\n", t.origSecs(time.Duration(e.At-armAt)*time.Millisecond), e.Note, e.Detail)
	}
	if len(runs) != 3 {
		return nil, fmt.Errorf("want 3 runs, got %d", len(runs))
	}
	secs := func(a, b int64) float64 { return t.origSecs(time.Duration(b-a) * time.Millisecond) }
	first := secs(armAt, runs[0].At)
	d1, d2 := secs(runs[0].At, runs[1].At), secs(runs[1].At, runs[2].At)
	okFirst := runs[0].Note == "retryCount=0 isRetry=false mode=flaky"
	okRetries := runs[1].Note == "retryCount=1 isRetry=true mode=flaky" && runs[2].Note == "retryCount=2 isRetry=true mode=flaky" && st.Alarm == nil
	during := strings.Contains(runs[0].Detail, "getAlarm()=null")
	return []tourRow{
		{"setAlarm(now+500ms)", "runs after ~0.5 s, retryCount=0 isRetry=false",
			fmt.Sprintf("runs after %.1f s, %s", first, strings.TrimSuffix(runs[0].Note, " mode=flaky")),
			okFirst && first >= 0.4 && first <= 1.2},
		{"getAlarm() inside alarm()", "null", map[bool]string{true: "null", false: "the alarm"}[during], during},
		{"alarm() throws twice", "retryCount=1,2 isRetry=true; ~2 s, ~4-5 s",
			fmt.Sprintf("retryCount=1,2 isRetry=true; %.1f s, %.1f s", d1, d2),
			okRetries && d1 >= 1.8 && d1 <= 2.8 && d2 >= 3.6 && d2 <= 5.4},
	}, nil
}

// the original: a pending alarm wakes an evicted object, constructor first.
func (t *tour) wake() ([]tourRow, error) {
	for _, p := range []string{"/reset?o=wake", fmt.Sprintf("/arm?o=wake&ms=%d", t.origTime(30*time.Second).Milliseconds())} {
		if err := t.curl(p, nil); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(t.out, "# idle for %v (the original's ~10 s), the object is evicted; the alarm comes due at +30 s\n", t.origTime(10*time.Second))
	t.sleep(35 * time.Second)
	st, err := t.state("wake")
	if err != nil {
		return nil, err
	}
	var run *LabEvent
	for i := range st.Timeline {
		if st.Timeline[i].Kind == "alarm" {
			run = &st.Timeline[i]
		}
	}
	if run == nil {
		return nil, errors.New("the alarm did not run")
	}
	fmt.Fprintf(t.out, "  alarm: %s (%s)\n", run.Note, run.Detail)
	woke := strings.Contains(run.Detail, "constructor ran first")
	named := strings.Contains(run.Detail, "name=wake")
	here := "alarm() on a live instance"
	if woke {
		here = "constructor, then alarm()"
	}
	if named {
		here += "; name=wake"
	}
	return []tourRow{{"alarm due on an evicted object", "constructor, then alarm(); name set", here, woke && named}}, nil
}
