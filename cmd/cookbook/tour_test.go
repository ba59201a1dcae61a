package main

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
)

// The tour runs in a synctest bubble: its waits take no time and its
// clock is exact, so every row must match, every run.
func TestTour_EveryExperimentMatchesTheOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		rows, err := runTour(t.Context(), &out, tourOptions{Scale: 20})
		if err != nil {
			t.Fatalf("runTour: %v\n%s", err, out.String())
		}
		if got, want := len(rows), 18; got != want {
			t.Errorf("rows: got %d, want %d", got, want)
		}
		for _, r := range rows {
			if !r.Match {
				t.Errorf("%s: the original showed %q, the tour %q", r.Experiment, r.Original, r.Here)
			}
		}
		// The transcripts have the original's shape.
		for _, want := range []string{
			`"overwritten": true`,
			`"afterDelete": null`,
			`{"armedNew": true, "alarmAt": `,
			`{"kind": "flush", "note": "n=5", "at": `,
			"t+20s:   attempts=4  alarmPending=True   [retryCount=0..3]",
			"t+140s:  attempts=7  alarmPending=False  [retryCount=0..6]",
			"t+200s:  attempts=7  alarmPending=False  [retryCount=0..6]",
			"event=alarm_dropped seq=1 object=lab/fail attempts=7",
			`"event":"alarm_failed","do":"link-tour","retryCount":0,"lastAttempt":false`,
			"no await between read and write (C1)          stock 50, 50 reserves: 50 succeeded, stock now 0, lost updates 0",
			`"cleared": true`,
			"bob <- pong",
			"18 of 18 match.",
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

func TestTourCommand_RejectsABadScale(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runTo(t.Context(), []string{"tour", "-scale", "0"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-scale") {
		t.Errorf("tour -scale 0: got %v, want an error about -scale", err)
	}
}
