package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/cmd/internal/inspectjson"
	"github.com/durable-go/durable/core"
)

// S-O8: the inspector's JSON: the catalog's namespaces and the runtime's
// stats; a namespace's objects a page at a time; one object's tables (the
// runtime's marked), its alarm and timers with their retry state, its
// WebSockets with tags and attachments.
func TestInspect_JSON(t *testing.T) {
	_, h := testApp(t, core.Options{})
	for _, o := range []string{"a", "b", "c"} {
		get(t, h, "/hit?o="+o+"&n=2", nil)
	}
	get(t, h, "/arm?o=b&ms=3600000", nil)
	srv := httptest.NewServer(h) // 127.0.0.1
	t.Cleanup(srv.Close)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/room/r1?name=ann", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, msg, err := c.ReadMessage(); err != nil || !strings.HasPrefix(string(msg), "!live") {
		t.Fatalf("joining the room: %q, %v", msg, err)
	}

	var nss struct {
		Namespaces []string         `json:"namespaces"`
		Stats      map[string]int64 `json:"stats"`
	}
	get(t, h, "/inspect/namespaces", &nss)
	for _, want := range []string{"lab", "rooms"} {
		if !slices.Contains(nss.Namespaces, want) {
			t.Errorf("namespaces %v, want %s among them", nss.Namespaces, want)
		}
	}
	if nss.Stats["turns"] == 0 || nss.Stats["resident"] == 0 {
		t.Errorf("stats %v, want turns and resident objects", nss.Stats)
	}

	var page struct {
		Objects []objectEntry `json:"objects"`
		Next    string        `json:"next"`
	}
	get(t, h, "/inspect/objects?ns=lab&limit=2", &page)
	if len(page.Objects) != 2 || page.Objects[0].Name != "a" || page.Next != "b" {
		t.Fatalf("first page %+v, want a, b and next b", page)
	}
	get(t, h, "/inspect/objects?ns=lab&limit=2&after="+page.Next, &page)
	if len(page.Objects) != 1 || page.Objects[0].Name != "c" || page.Next != "" {
		t.Fatalf("second page %+v, want c alone", page)
	}

	var obj struct {
		Name     string              `json:"name"`
		Resident bool                `json:"resident"`
		Alarm    *int64              `json:"alarm"`
		Tables   []inspectjson.Table `json:"tables"`
		Timers   []inspectTimer      `json:"timers"`
	}
	get(t, h, "/inspect/object?ns=lab&name=b", &obj)
	if obj.Name != "b" || !obj.Resident || obj.Alarm == nil {
		t.Fatalf("object %+v, want b, resident, with an alarm", obj)
	}
	if len(obj.Timers) != 1 || obj.Timers[0].Key != "" || obj.Timers[0].At != *obj.Alarm || obj.Timers[0].Retries != 0 || obj.Timers[0].Running {
		t.Errorf("timers %+v, want the alarm, not running, no retries", obj.Timers)
	}
	i := slices.IndexFunc(obj.Tables, func(tb inspectjson.Table) bool { return tb.Name == "events" })
	if i < 0 || obj.Tables[i].Runtime || !slices.Contains(obj.Tables[i].Columns, "kind") || obj.Tables[i].Rows == 0 {
		t.Errorf("tables %+v, want events with its columns and rows", obj.Tables)
	}
	if !slices.ContainsFunc(obj.Tables, func(tb inspectjson.Table) bool { return tb.Name == "_durable_timers" && tb.Runtime && tb.Rows == 1 }) {
		t.Errorf("tables %+v, want _durable_timers marked as the runtime's, one row", obj.Tables)
	}

	var room struct {
		WebSockets []struct {
			Tags       []string       `json:"tags"`
			Attachment map[string]any `json:"attachment"`
		} `json:"webSockets"`
	}
	get(t, h, "/inspect/object?ns=rooms&name=r1", &room)
	if len(room.WebSockets) != 1 || !slices.Equal(room.WebSockets[0].Tags, []string{"room"}) || room.WebSockets[0].Attachment["name"] != "ann" {
		t.Errorf("room's WebSockets %+v, want ann's, tagged room", room.WebSockets)
	}

	code, body := do(t, h, http.MethodGet, "/inspect/object?ns=lab&name=nobody", nil)
	if code != http.StatusNotFound || !strings.Contains(string(body), "no such object") {
		t.Errorf("an unknown object: %d %s, want 404", code, body)
	}
}

// S-O8: /inspect/sql answers a read-only query in the object's turn; a write
// of any kind is refused with 400 and changes nothing; bad SQL is a 400 too.
func TestInspect_SQL(t *testing.T) {
	_, h := testApp(t, core.Options{})
	get(t, h, "/hit?o=x&n=3", nil)
	sql := func(q string) (int, []byte) {
		return do(t, h, http.MethodGet, "/inspect/sql?"+url.Values{"ns": {"lab"}, "name": {"x"}, "q": {q}}.Encode(), nil)
	}
	var res struct {
		Columns   []string `json:"columns"`
		Rows      [][]any  `json:"rows"`
		Truncated bool     `json:"truncated"`
	}
	count := func() float64 {
		t.Helper()
		code, body := sql("SELECT n FROM pending")
		if code != http.StatusOK {
			t.Fatalf("SELECT: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		return res.Rows[0][0].(float64)
	}
	if n := count(); n != 3 || !slices.Equal(res.Columns, []string{"n"}) {
		t.Fatalf("pending %v in %+v, want 3", n, res)
	}
	for _, q := range []string{"UPDATE pending SET n = 99", "DELETE FROM events", "DROP TABLE events", "PRAGMA user_version = 1", "ATTACH ':memory:' AS m"} {
		code, body := sql(q)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "read-only") {
			t.Errorf("%s: %d %s, want 400 read-only", q, code, body)
		}
	}
	if n := count(); n != 3 {
		t.Errorf("pending is %v after the refused writes, want 3", n)
	}
	if code, body := sql("SELEC nonsense"); code != http.StatusBadRequest {
		t.Errorf("bad SQL: %d %s, want 400", code, body)
	}
	code, body := do(t, h, http.MethodGet, "/inspect/sql?ns=lab&name=x&limit=1&q="+url.QueryEscape("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5) SELECT i FROM c"), nil)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Rows) != 1 || !res.Truncated {
		t.Errorf("limit=1: %s, want one row, truncated", body)
	}
	// The object still counts hits.
	get(t, h, "/hit?o=x&n=1", nil)
	if n := count(); n != 4 {
		t.Errorf("pending %v after one more hit, want 4", n)
	}
}

// S-O2: one truth for an object's size: /objects and /inspect/objects give
// the bytes of its database and WAL now, as /inspect/object does, for an
// object that was never evicted too.
func TestObjects_SizeIsInspectsSize(t *testing.T) {
	_, h := testApp(t, core.Options{})
	get(t, h, "/hit?o=big&n=1000", nil)
	var obj struct {
		Size int64 `json:"size"`
	}
	get(t, h, "/inspect/object?ns=lab&name=big", &obj)
	if obj.Size == 0 {
		t.Fatal("/inspect/object: size 0")
	}
	for _, path := range []string{"/objects?ns=lab", "/inspect/objects?ns=lab"} {
		var page struct {
			Objects []objectEntry `json:"objects"`
		}
		get(t, h, path, &page)
		if len(page.Objects) != 1 || page.Objects[0].Size != obj.Size {
			t.Errorf("%s: %+v, want big with size %d, as /inspect/object", path, page.Objects, obj.Size)
		}
	}
}

// The workshop has one list of namespaces: /inspect/namespaces's, which the
// 400 of /objects and /inspect/objects names, an inventory race's included.
func TestObjects_OneListOfNamespaces(t *testing.T) {
	_, h := testApp(t, core.Options{})
	get(t, h, "/inventory/race?n=2&await=1ms", nil)
	var nss struct {
		Namespaces []string `json:"namespaces"`
	}
	get(t, h, "/inspect/namespaces", &nss)
	if !slices.Contains(nss.Namespaces, "inventory_await_1ms") {
		t.Fatalf("/inspect/namespaces: %v, want the race's namespace among them", nss.Namespaces)
	}
	want := "bad parameter ns: want one of " + strings.Join(nss.Namespaces, ", ") + `, got "nope"`
	for _, path := range []string{"/objects?ns=nope", "/inspect/objects?ns=nope"} {
		code, body := do(t, h, http.MethodGet, path, nil)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest || e.Error != want {
			t.Errorf("GET %s: %d %s, want 400 %q", path, code, body, want)
		}
	}
	var page struct {
		Objects []objectEntry `json:"objects"`
	}
	get(t, h, "/objects?ns=inventory_await_1ms", &page)
	if len(page.Objects) == 0 {
		t.Error("/objects?ns=inventory_await_1ms: no objects")
	}
}
