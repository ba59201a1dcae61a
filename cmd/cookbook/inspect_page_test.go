//go:build browser

package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core"
)

// S-O8: the inspector's page in a real headless Chromium: it lists the
// namespaces and the runtime's stats, pages through a namespace's objects,
// shows one object's tables, alarm and timers, a room's WebSocket with its
// tag and attachment, runs a read-only query from a table's name, and shows
// a refused write as an error while the data stays as it was. The
// screenshot is kept in $ARTIFACTS_DIR, if set.
func TestInspectorPage_InChromium(t *testing.T) {
	_, h := testApp(t, core.Options{})
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)
	for _, o := range []string{"o01", "o02", "o03", "o04", "o05", "o06", "o07", "o08", "o09", "o10", "o11", "o12", "o13", "o14", "o15", "o16", "o17", "o18", "o19", "o20", "o21", "o22"} {
		get(t, h, "/hit?o="+o+"&n=2", nil)
	}
	get(t, h, "/arm?o=o02&ms=3600000", nil)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/room/r1?name=ann", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.ReadMessage(); err != nil {
		t.Fatal(err)
	}

	tab := browser(t)
	runStep(t, tab, "the page lists the namespaces and the stats",
		chromedp.Navigate(srv.URL+"/inspect"),
		until(`[...document.querySelectorAll("#namespaces li")].map(li => li.dataset.ns).join(",").includes("lab")`),
		until(`document.querySelector("#stats").textContent.includes("turns")`))
	runStep(t, tab, "a namespace's first page, then the next",
		chromedp.Click(chromedp.CSS(`#namespaces li[data-ns="lab"]`)),
		until(`document.querySelectorAll("#objects li").length === 20 && document.querySelector("#objects-more").style.display === ""`),
		chromedp.Click(chromedp.CSS("#objects-more")),
		until(`document.querySelectorAll("#objects li").length === 22 && document.querySelector("#objects-more").style.display === "none"`))
	runStep(t, tab, "one object: its tables, its alarm and timer",
		chromedp.Click(chromedp.CSS(`#objects li[data-name="o02"]`)),
		until(`document.querySelector("#object-name").textContent === "lab / o02"`),
		until(`document.querySelector("#tables").textContent.includes("events") && document.querySelector("#tables").textContent.includes("_durable_timers (runtime)")`),
		until(`document.querySelector("#alarm").dataset.at !== "" && document.querySelectorAll("#timers tbody tr").length === 1`),
		until(`document.querySelector("#timers tbody tr")?.cells[1].textContent === "(alarm)" && document.querySelector("#timers tbody tr")?.cells[5].textContent === "0"`))
	runStep(t, tab, "a table's name runs a read-only query on it",
		chromedp.Click(chromedp.CSS(`#tables td[data-table="pending"]`)),
		until(`document.querySelector("#sql-result thead") !== null && document.querySelector("#sql-result thead").textContent.includes("n")`),
		until(`document.querySelector("#sql-result tbody tr")?.cells[1].textContent === "2"`))
	runStep(t, tab, "a write is refused, shown as an error, and changes nothing",
		chromedp.SetValue(chromedp.CSS("#sql-q"), "UPDATE pending SET n = 99"),
		chromedp.Click(chromedp.CSS("#sql-run")),
		until(`document.querySelector("#sql-error").textContent.includes("read-only")`),
		chromedp.SetValue(chromedp.CSS("#sql-q"), "SELECT n FROM pending"),
		chromedp.Click(chromedp.CSS("#sql-run")),
		until(`document.querySelector("#sql-error").textContent === "" && document.querySelector("#sql-result tbody tr")?.cells[0].textContent === "2"`))
	runStep(t, tab, "a room: its WebSocket with its tag and attachment",
		chromedp.Navigate(srv.URL+"/inspect?ns=rooms&name=r1"),
		until(`document.querySelector("#object-name").textContent === "rooms / r1"`),
		until(`document.querySelector("#websockets tbody tr") !== null && document.querySelector("#websockets tbody tr").cells[0].textContent === "room" && document.querySelector("#websockets tbody tr").cells[1].textContent.includes('"name":"ann"')`))

	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "cookbook-inspector.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
