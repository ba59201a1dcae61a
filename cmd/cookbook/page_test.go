package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/durable-go/durable/core"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// skipBrowserEnv opts out of the browser test on a machine without
// chromium. Without it a missing chromium fails the test: CI must have it.
const skipBrowserEnv = "COOKBOOK_SKIP_BROWSER"

// The live page in a real headless Chromium: two tabs chat through a room,
// the limiter and the race draw their results, and the alarm timeline
// shows a flush, then a handler that throws until its alarm is dropped.
// The screenshot is kept as an artefact.
func TestPage_InChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv(skipBrowserEnv) != "" {
			t.Skipf("%s is missing and %s is set", chromiumPath, skipBrowserEnv)
		}
		t.Fatalf("%v: install chromium (apt-get install chromium), or set %s=1 to skip this test", err, skipBrowserEnv)
	}
	// A short retry ladder (25 ms ... 0.8 s) so that the throwing alarm is
	// dropped within the test.
	_, h := testApp(t, core.Options{AlarmRetry: core.RetryPolicy{FirstDelay: 25 * time.Millisecond, Jitter: -1}})
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := context.WithTimeout(actx, 90*time.Second)
	t.Cleanup(cancel)
	ann, cancelAnn := chromedp.NewContext(ctx)
	t.Cleanup(cancelAnn)

	step := func(tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tab, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	until := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(20*time.Second))
	}
	live := until(`document.querySelector("#chat-status").textContent === "live"`)

	step(ann, "ann opens the page", chromedp.Navigate(srv.URL+"/?name=ann&room=test&o=pagetest"), live)
	bob, cancelBob := chromedp.NewContext(ann) // a second tab in the same browser
	t.Cleanup(cancelBob)
	step(bob, "bob opens the page", chromedp.Navigate(srv.URL+"/?name=bob&room=test&o=bobs"), live)

	step(ann, "ann says hello",
		chromedp.SendKeys(chromedp.CSS("#chat-input"), "hello from ann"),
		chromedp.Click(chromedp.CSS("#chat-send")))
	got := `[...document.querySelectorAll("#chat-log .msg")].some(m => m.dataset.from === "ann" && m.dataset.text === "hello from ann")`
	step(bob, "bob sees ann's message", until(got))
	step(ann, "ann sees her own message", until(got))
	step(bob, "bob answers",
		chromedp.SendKeys(chromedp.CSS("#chat-input"), "hi ann"),
		chromedp.Click(chromedp.CSS("#chat-send")))
	step(ann, "ann sees bob's answer", until(`[...document.querySelectorAll("#chat-log .msg")].some(m => m.dataset.from === "bob" && m.dataset.text === "hi ann")`))

	step(ann, "the race draws both bars",
		chromedp.Click(chromedp.CSS("#race-run")),
		until(`document.querySelector("#bar-safe").dataset.lost !== undefined && document.querySelector("#bar-racy").dataset.lost !== undefined`))
	safe, err := chromedp.Run(ann, chromedp.Evaluate[map[string]string](`({...document.querySelector("#bar-safe").dataset})`))
	if err != nil {
		t.Fatal(err)
	}
	if safe["lost"] != "0" || safe["succeeded"] != "50" || safe["stock"] != "0" {
		t.Errorf("the safe bar shows %v, want 50 succeeded, stock 0, lost 0", safe)
	}
	racy, err := chromedp.Run(ann, chromedp.Evaluate[map[string]string](`({...document.querySelector("#bar-racy").dataset})`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("race: safe %v, racy %v", safe, racy)

	step(ann, "the limiter lets 5 of 7 through",
		chromedp.Click(chromedp.CSS("#limit-run")),
		until(`document.querySelector("#limit-allowed").textContent === "5" && document.querySelector("#limit-refused").textContent === "2"`))

	marks := func(kind string, n int) chromedp.Action[chromedp.Void] {
		return until(`document.querySelectorAll("#timeline .mark-` + kind + `").length >= ` + strconv.Itoa(n))
	}
	step(ann, "five hits, one flush on the timeline",
		chromedp.Click(chromedp.CSS("#lab-hit")),
		marks("arm", 1),
		marks("flush", 1))
	step(ann, "a handler that throws: 7 runs, then a drop and a dead letter",
		chromedp.Click(chromedp.CSS("#mode-throw")),
		until(`document.querySelector("#mode-throw").classList.contains("on")`),
		chromedp.Click(chromedp.CSS("#lab-arm")),
		marks("drop", 1),
		until(`document.querySelectorAll("#deadletters .dl").length === 1`))
	runs, err := chromedp.Run(ann, chromedp.Evaluate[int](`document.querySelectorAll("#timeline .mark-alarm").length`))
	if err != nil {
		t.Fatal(err)
	}
	if runs != 8 { // the flush's run, then 7 that threw
		t.Errorf("the timeline shows %d runs, want 8", runs)
	}

	png, err := chromedp.Run(ann, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "cookbook-page.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
