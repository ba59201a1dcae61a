//go:build browser

// The page's tests drive a real headless Chromium, so they are behind the
// build tag "browser": go test -tags browser ./cmd/cookbook. The browser
// is $CHROME or $CHROMIUM, else the first of chromium, chromium-browser
// and google-chrome on PATH.

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// findBrowser returns the browser to drive, or fails the test: with the
// tag set, a missing browser is a failure, not a skip.
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, env := range []string{"CHROME", "CHROMIUM"} {
		if p := os.Getenv(env); p != "" {
			path, err := exec.LookPath(p)
			if err != nil {
				t.Fatalf("$%s=%s: %v", env, p, err)
			}
			return path
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no browser: set $CHROME (or $CHROMIUM) to Chrome or Chromium, or put chromium on PATH (apt-get install chromium)")
	return ""
}

// browser starts a headless browser for the test, with a fresh profile and
// nothing that reaches the network on its own, and returns its first tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findBrowser(t)),
		chromedp.Headless,
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
	tab, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	return tab
}

// runStep runs actions in tab, failing the test with what if they fail.
func runStep(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tab, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript condition to hold on the page.
func until(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(20*time.Second))
}

// The live page in a real headless Chromium: two tabs chat through a room,
// each tab's limiter and alarm timeline are its own, the limiter and the
// race draw their results and clear them on an error, and the alarm
// timeline shows a flush, then a handler that throws until its alarm is
// dropped. The screenshot is kept in $ARTIFACTS_DIR, if set.
func TestPage_InChromium(t *testing.T) {
	// A short retry ladder (25 ms ... 0.8 s) so that the throwing alarm is
	// dropped within the test.
	_, h := testApp(t, core.Options{AlarmRetry: core.RetryPolicy{FirstDelay: 25 * time.Millisecond, Jitter: -1}})
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)

	ann := browser(t)
	live := until(`document.querySelector("#chat-status").textContent === "live"`)

	runStep(t, ann, "ann opens the page", chromedp.Navigate(srv.URL+"/?name=ann&room=test"), live)
	bob, cancelBob := chromedp.NewContext(ann) // a second tab in the same browser
	t.Cleanup(cancelBob)
	runStep(t, bob, "bob opens the page", chromedp.Navigate(srv.URL+"/?name=bob&room=test"), live)
	step := func(tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		runStep(t, tab, what, actions...)
	}

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

	// Each tab has keys of its own: bob's check is not refused because of
	// ann's, and neither tab draws the other's timeline.
	fiveOfSeven := until(`document.querySelector("#limit-allowed").textContent === "5" && document.querySelector("#limit-refused").textContent === "2"`)
	step(ann, "the limiter lets 5 of 7 through", chromedp.Click(chromedp.CSS("#limit-run")), fiveOfSeven)
	step(bob, "bob's limiter, right after ann's, lets 5 of 7 through too", chromedp.Click(chromedp.CSS("#limit-run")), fiveOfSeven)
	keys := map[string]string{}
	for name, tab := range map[string]context.Context{"ann": ann, "bob": bob} {
		k, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#limit-key").value + " " + document.querySelector("#lab-o").value + " " + document.querySelector("#tab-key").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k
	}
	if keys["ann"] == keys["bob"] {
		t.Errorf("both tabs use the keys %q, want keys of their own", keys["ann"])
	}
	step(ann, "a second check in the same tab finds the window full, and says why",
		chromedp.Click(chromedp.CSS("#limit-run")),
		until(`document.querySelector("#limit-allowed").textContent === "0" && document.querySelector("#limit-note").textContent.includes("still holds this key's earlier calls")`))

	// An error clears the results it would otherwise leave on screen.
	step(ann, "a bad window: an error, and no stale result under it",
		chromedp.SetValue(chromedp.CSS("#limit-window"), "abc"),
		chromedp.Click(chromedp.CSS("#limit-run")),
		until(`document.querySelector("#error").style.display === "block" && document.querySelector("#error").textContent.includes("window")`),
		until(`document.querySelector("#limit-allowed").textContent === "–" && document.querySelector("#limit-dots").children.length === 0`),
		chromedp.SetValue(chromedp.CSS("#limit-window"), "60s"))
	step(ann, "a bad await: an error, and the race's bars are cleared",
		chromedp.SetValue(chromedp.CSS("#race-await"), "abc"),
		chromedp.Click(chromedp.CSS("#race-run")),
		until(`document.querySelector("#error").textContent.includes("await")`),
		until(`document.querySelector("#bar-safe").dataset.lost === undefined && document.querySelector("#bar-safe .caption").textContent.startsWith("failed")`),
		chromedp.SetValue(chromedp.CSS("#race-await"), "1ms"))

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

	bobRuns, err := chromedp.Run(bob, chromedp.Evaluate[int](`document.querySelectorAll("#timeline .mark-alarm").length`))
	if err != nil {
		t.Fatal(err)
	}
	if bobRuns != 0 {
		t.Errorf("bob's timeline shows %d runs of ann's object, want 0", bobRuns)
	}

	png, err := chromedp.Run(ann, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "cookbook-page.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// In cluster mode the page's cluster panel shows the members and each
// shard's owner, live: a node that falls silent is shown dead, and its
// shard moves to the other node. The cluster has one shard, which
// placement (rendezvous hashing of n1 and n2) gives to n2, so that no
// hand-over moves it while the test watches. // S-CL12
func TestPage_ClusterPanel(t *testing.T) {
	c := replogtest.NewMemCluster().WithShards(1)
	_, h1 := clusterApp(t, c, "n1", "http://10.0.0.1:8787")
	view2, h2 := clusterApp(t, c, "n2", "http://10.0.0.2:8787")
	get(t, h2, "/session/touch?id=s1&key=user&value=ada", nil)
	srv := httptest.NewServer(h1) // n1's page
	t.Cleanup(srv.Close)

	tab := browser(t)
	held := `[...document.querySelectorAll("#shard-grid .shard")].filter(d => d.dataset.owner === %q).length`
	runStep(t, tab, "n1's page shows n2 ready, holding the session's shard",
		chromedp.Navigate(srv.URL+"/"),
		until(`!document.querySelector("#cluster").hidden && document.querySelector("#cluster-self").textContent === "n1"`),
		until(`document.querySelector('#cluster-members tr[data-node="n2"]').dataset.state === "ready"`),
		until(fmt.Sprintf(held, "n2")+" === 1"),
		until(`document.querySelectorAll("#shard-grid .shard").length === 1`))
	view2.CutBeacon(true) // n2 falls silent, as if killed
	view2.CutLeases(true)
	runStep(t, tab, "n1's page shows n2 dead and its shard moved to n1",
		until(`document.querySelector('#cluster-members tr[data-node="n2"]').dataset.state === "dead (no beat)"`),
		until(fmt.Sprintf(held, "n2")+" === 0 && "+fmt.Sprintf(held, "n1")+" === 1"))
	view2.CutBeacon(false)
	view2.CutLeases(false)
}

// A room whose history holds a frame the browser cannot take (text that
// is not UTF-8, as an older data directory may hold) makes the browser
// drop the connection at each replay. The page must not reconnect with
// ?since= forever: after two failed replays it joins again without the
// history, and stays live.
func TestPage_SkipsAHistoryItCannotRead(t *testing.T) {
	bad := []byte("2 {\"name\":\"old\",\"joinedAt\":1}:caf\xe9") // Latin-1, not UTF-8
	var mu sync.Mutex                                            // protects joins
	var joins []string                                           // each join's ?since=, "-" for none
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", pageHandler())
	mux.HandleFunc("GET /room/{name}", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		since, ok := r.URL.Query()["since"]
		mu.Lock()
		first := len(joins) == 0
		if ok {
			joins = append(joins, since[0])
		} else {
			joins = append(joins, "-")
		}
		mu.Unlock()
		switch {
		case ok: // the replay holds the bad frame
			c.WriteMessage(websocket.TextMessage, bad)
		case first: // live, then the bad frame arrives
			c.WriteMessage(websocket.TextMessage, []byte("!live 1"))
			c.WriteMessage(websocket.TextMessage, bad)
		default: // a join without history: live, and nothing more
			c.WriteMessage(websocket.TextMessage, []byte("!live 2"))
		}
		for { // until the browser closes
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, map[string]any{}) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := browser(t)
	runStep(t, tab, "the page skips the history and stays live",
		chromedp.Navigate(srv.URL+"/?name=ann&room=old"),
		until(`[...document.querySelectorAll("#chat-log .msg.system")].some(m => m.textContent.includes("skipped"))`),
		until(`document.querySelector("#chat-status").textContent === "live"`))
	mu.Lock()
	got := append([]string(nil), joins...)
	mu.Unlock()
	want := []string{"-", "1", "1", "-"}
	if len(got) != len(want) {
		t.Fatalf("joins (?since=): got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("joins (?since=): got %q, want %q", got, want)
		}
	}
}

// In cluster mode a room's WebSockets are accepted at whichever node
// serves the page: the connection stays there and its traffic goes to the
// node that owns the room. // S-CL18
func TestPage_RoomOnAnotherNode(t *testing.T) {
	c := replogtest.NewMemCluster()
	var h1, h2 http.Handler
	srv1 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h1.ServeHTTP(w, r) }))
	srv2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h2.ServeHTTP(w, r) }))
	_, _, h1 = clusterPeer(t, c, "n1", "http://"+srv1.Listener.Addr().String(), true)
	_, _, h2 = clusterPeer(t, c, "n2", "http://"+srv2.Listener.Addr().String(), true)
	srv1.Start()
	t.Cleanup(srv1.Close)
	srv2.Start()
	t.Cleanup(srv2.Close)
	tab := browser(t)
	runStep(t, tab, "the browser starts", chromedp.Navigate("about:blank"))
	// n1 owns the room (for IdleTimeout after its last call, 10 s: the
	// browser has started by now).
	get(t, h1, "/room/lobby", nil)
	runStep(t, tab, "n2's page joins the room live, relayed to n1",
		chromedp.Navigate(srv2.URL+"/?room=lobby&name=ann"),
		until(`document.querySelector("#chat-status").textContent === "live"`),
		until(`!document.querySelector("#chat-owner")`))
}
