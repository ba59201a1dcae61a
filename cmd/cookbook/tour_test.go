package main

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
)

// The tour runs in a synctest bubble: its waits take no time and its
// clock is exact (the retry jitter stays random). Every row has the
// verdict the tour's own observation gives it, and none is unexpected.
func TestTour_VerdictsAreHonest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		rows, err := runTour(t.Context(), &out, tourOptions{Scale: 20})
		if err != nil {
			t.Fatalf("runTour: %v\n%s", err, out.String())
		}
		// The rows where this runtime does not do what the original did,
		// and the verdict each must carry. Every other row is "same".
		want := map[string]verdict{
			"after the 7th run":                better,  // a dead letter, where the original loses the alarm
			"ann sends hello to a room of two": differs, // an offset in front
			"setAlarm in a facet":              better,  // workerd's facets have no alarms
		}
		evicted := "idle 5, 9, 11, 15 s, then a message" // same or differs: the sweep's phase decides
		seen := map[string]bool{}
		for _, r := range rows {
			seen[r.Experiment] = true
			w, ok := want[r.Experiment]
			if !ok {
				w = same
			}
			if r.Experiment == evicted && (r.Verdict == same || r.Verdict == differs) {
				w = r.Verdict
			}
			if r.Verdict != w {
				t.Errorf("%s: verdict %s, want %s (the original showed %q, the tour %q)", r.Experiment, r.Verdict, w, r.Original, r.Here)
			}
			if (r.Verdict == differs || r.Verdict == better) && r.Why == "" {
				t.Errorf("%s: verdict %s without a reason", r.Experiment, r.Verdict)
			}
		}
		// S-W11: in the bubble the clock is exact: the same instance at 5
		// and 9 s idle, a new one at 11 and 15 s, as the original.
		for _, r := range rows {
			if r.Experiment == evicted && !strings.HasPrefix(r.Here, "instances 1,1,2,3;") {
				t.Errorf("%s: got %q, want instances 1,1,2,3", evicted, r.Here)
			}
		}
		for exp := range want {
			if !seen[exp] {
				t.Errorf("no row %q", exp)
			}
		}
		for _, exp := range []string{"gaps between the 7 runs (W2)", "getAlarm() from a request while retries are pending (W1)", evicted, "ping to an evicted object", "attachments of 16384, 16385, 16388 bytes"} {
			if !seen[exp] {
				t.Errorf("no row %q", exp)
			}
		}
		// The transcripts have the original's shape.
		for _, want := range []string{
			`"overwritten": true`,
			`"afterDelete": null`,
			`{"armedNew": true, "alarmAt": `,
			`{"kind": "flush", "note": "n=5", "at": `,
			"t+20s:   attempts=4  alarmPending=True   [retryCount=0..3]  getAlarm()=set+",
			"t+200s:  attempts=7  alarmPending=False  [retryCount=0..6]  getAlarm()=null",
			"event=alarm_dropped seq=1 object=lab/fail attempts=7",
			`"event":"alarm_failed","do":"link-tour","retryCount":0,"lastAttempt":false`,
			"no await between read and write (C1)          stock 50, 50 reserves: 50 succeeded, stock now 0, lost updates 0",
			`"cleared": true`,
			"bob <- pong",
			"rows: ",
			"; 0 unexpected.",
			"== Telemetry: the runtime's metrics", // S-T2: read from /metrics
			"durable_alarms_dead_lettered_total          1  lab=1",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("transcript lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("transcript:\n%s", out.String())
		}
	})
}

// A row that is neither the original's behaviour nor this runtime's is
// unexpected, and the verdict never says same for a row that differs.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		asOriginal, asDesigned bool
		v                      verdict
		want                   verdict
	}{
		{true, false, differs, same},
		{true, true, better, same},
		{false, true, differs, differs},
		{false, true, better, better},
		{false, false, differs, unexpected},
		{false, false, better, unexpected},
	} {
		got := judge("x", "o", "h", tc.asOriginal, tc.asDesigned, tc.v, "why")
		if got.Verdict != tc.want {
			t.Errorf("judge(asOriginal=%t, asDesigned=%t, %s): got %s, want %s", tc.asOriginal, tc.asDesigned, tc.v, got.Verdict, tc.want)
		}
		if got.Verdict == same && got.Why != "" {
			t.Errorf("a same row with a reason: %q", got.Why)
		}
	}
}

func TestTourCommand_RejectsABadScale(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runTo(t.Context(), []string{"tour", "-scale", "0"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-scale") {
		t.Errorf("tour -scale 0: got %v, want an error about -scale", err)
	}
}
