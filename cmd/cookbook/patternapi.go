package main

// The routes of the other patterns: limiter, inventory race, sessions,
// link counter, rooms.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/durable-go/durable/patterns/inventory"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/durable-go/durable/patterns/session"
)

// The limiter (the original, L1).

type limitCheck struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int   `json:"remaining"`
	RetryAfterMs int64 `json:"retryAfterMs"`
}

type limitResult struct {
	Key     string       `json:"key"`
	Limit   int          `json:"limit"`
	Window  string       `json:"window"`
	Results []limitCheck `json:"results"`
	Allowed int          `json:"allowed"`
	Refused int          `json:"refused"`
}

// limit makes n checks against the key's limiter, one turn each.
func (a *app) limit(r *http.Request) (any, error) {
	key, err := nameParam(r, "key", "demo")
	if err != nil {
		return nil, err
	}
	n, err := intParam(r, "n", 7, 1, 1000)
	if err != nil {
		return nil, err
	}
	limit, err := intParam(r, "limit", 5, 1, 1000)
	if err != nil {
		return nil, err
	}
	window, err := durationParam(r, "window", time.Minute, time.Millisecond, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	stub, err := a.limits.Get(key)
	if err != nil {
		return nil, err
	}
	out := limitResult{Key: key, Limit: limit, Window: window.String(), Results: make([]limitCheck, 0, n)}
	for range n {
		d, err := a.m.limiter.Allow(r.Context(), stub, limiter.Check{Limit: limit, Window: window})
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, limitCheck{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfterMs: d.RetryAfter.Milliseconds()})
		if d.Allowed {
			out.Allowed++
		} else {
			out.Refused++
		}
	}
	return out, nil
}

// The inventory race (the original, C1 and C2).

// raceSide is one item's result: n callers reserved one unit each.
type raceSide struct {
	Succeeded int     `json:"succeeded"` // reserves that said yes
	Stock     int     `json:"stock"`     // stock left
	Lost      int     `json:"lost"`      // yeses the stock does not show: lost updates
	Errors    int     `json:"errors"`    // calls that failed
	Millis    float64 `json:"ms"`
}

type raceResult struct {
	N     int      `json:"n"`
	Await string   `json:"await"`
	Safe  raceSide `json:"safe"` // Reserve: no await between read and write
	Racy  raceSide `json:"racy"` // ReserveRacy: an await in between
}

// inventories returns the namespace of items whose racy reserve awaits d.
// Await is an option of the namespace, so each distinct d gets one; d is
// whole milliseconds from 1 to 50, so there are at most 50.
func (a *app) inventories(d time.Duration) (*core.Namespace[*inventory.Inventory], error) {
	a.invMu.Lock()
	defer a.invMu.Unlock()
	if ns, ok := a.invs[d]; ok {
		return ns, nil
	}
	ns, err := inventory.Register(a.rt, fmt.Sprintf("inventory_await_%dms", d.Milliseconds()), inventory.Options{Await: d})
	if err != nil {
		return nil, err
	}
	a.invs[d] = ns
	return ns, nil
}

func (a *app) race(r *http.Request) (any, error) {
	n, err := intParam(r, "n", 50, 1, 1000)
	if err != nil {
		return nil, err
	}
	await, err := durationParam(r, "await", time.Millisecond, time.Millisecond, 50*time.Millisecond)
	if err != nil {
		return nil, err
	}
	if await%time.Millisecond != 0 {
		return nil, badParam("await", "whole milliseconds from 1ms to 50ms", r.Form.Get("await"))
	}
	ns, err := a.inventories(await)
	if err != nil {
		return nil, err
	}
	a.raceMu.Lock()
	defer a.raceMu.Unlock()
	res := raceResult{N: n, Await: await.String()}
	var wg sync.WaitGroup
	var safeErr, racyErr error
	wg.Go(func() {
		res.Safe, safeErr = raceItem(r.Context(), ns, "race-safe", n, (*inventory.Inventory).Reserve)
	})
	wg.Go(func() {
		res.Racy, racyErr = raceItem(r.Context(), ns, "race-racy", n, (*inventory.Inventory).ReserveRacy)
	})
	wg.Wait()
	return res, errors.Join(safeErr, racyErr)
}

// raceItem stocks the item with n units, then has n callers reserve one
// each at once with reserve, and counts what the stock shows.
func raceItem(ctx context.Context, ns *core.Namespace[*inventory.Inventory], name string, n int,
	reserve func(*inventory.Inventory, context.Context, int) (bool, error)) (raceSide, error) {
	stub, err := ns.Get(name)
	if err != nil {
		return raceSide{}, err
	}
	err = core.Do(ctx, stub, func(ctx context.Context, inv *inventory.Inventory) error {
		left, err := inv.Stock(ctx)
		if err != nil {
			return err
		}
		if left > 0 { // empty it, then stock exactly n
			if _, err := inv.Reserve(ctx, left); err != nil {
				return err
			}
		}
		return inv.Restock(ctx, n)
	})
	if err != nil {
		return raceSide{}, err
	}
	start := time.Now()
	var mu sync.Mutex // protects side
	var side raceSide
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ok, err := core.Call(ctx, stub, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
				return reserve(inv, ctx, 1)
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				side.Errors++
			case ok:
				side.Succeeded++
			}
		})
	}
	wg.Wait()
	side.Millis = float64(time.Since(start).Microseconds()) / 1000
	side.Stock, err = core.Call(ctx, stub, func(ctx context.Context, inv *inventory.Inventory) (int, error) { return inv.Stock(ctx) })
	side.Lost = side.Succeeded - (n - side.Stock)
	return side, err
}

// Sessions (the original, SE1).

type sessionAnswer struct {
	ID       string  `json:"id"`
	Key      string  `json:"key,omitempty"`
	Value    *string `json:"value,omitempty"`
	Deadline *int64  `json:"deadline"` // unix ms; null when there is no live session
}

func (a *app) sessionStub(r *http.Request) (*core.Stub[*session.Session], string, error) {
	id, err := nameParam(r, "id", "")
	if err != nil {
		return nil, "", err
	}
	stub, err := a.sessions.Get(id)
	return stub, id, err
}

// sessionTouch extends the session, and with key sets value in it (which
// extends it too).
func (a *app) sessionTouch(r *http.Request) (any, error) {
	stub, id, err := a.sessionStub(r)
	if err != nil {
		return nil, err
	}
	key, value := r.Form.Get("key"), r.Form.Get("value")
	if key != "" {
		return a.m.setValue(r.Context(), stub, sessionEntry{ID: id, Key: key, Value: value})
	}
	at, err := a.m.session.Touch(r.Context(), stub, struct{}{})
	if err != nil {
		return nil, err
	}
	ms := at.UnixMilli()
	return sessionAnswer{ID: id, Deadline: &ms}, nil
}

func (a *app) sessionGet(r *http.Request) (any, error) {
	stub, id, err := a.sessionStub(r)
	if err != nil {
		return nil, err
	}
	key := r.Form.Get("key")
	if key == "" {
		return nil, badParam("key", "the key of a value set with /session/touch?key=&value=", key)
	}
	v, err := a.m.getValue(r.Context(), stub, sessionEntry{ID: id, Key: key})
	if err != nil {
		return nil, err
	}
	if v.Missing {
		return nil, notFound("session %s has no value under %s: never set, or the session expired", clip(id), clip(key))
	}
	return v.Answer, nil
}

func (a *app) sessionEnd(r *http.Request) (any, error) {
	stub, id, err := a.sessionStub(r)
	if err != nil {
		return nil, err
	}
	if _, err := a.m.session.End(r.Context(), stub, struct{}{}); err != nil {
		return nil, err
	}
	return sessionAnswer{ID: id}, nil
}

func deadlineInto(ctx context.Context, s *session.Session, ans *sessionAnswer) error {
	at, ok, err := s.Deadline(ctx)
	if err == nil && ok {
		ms := at.UnixMilli()
		ans.Deadline = &ms
	}
	return err
}

// The link counter (the original's LinkCounter, K1-K4).

type counterAnswer struct {
	Link     string        `json:"link"`
	Recorded int           `json:"recorded,omitempty"`
	Total    int64         `json:"total"`
	FlushAt  *int64        `json:"flushAt"`           // unix ms; null when no flush is pending
	Flushed  []bucketCount `json:"flushed,omitempty"` // what the analytics store holds
}

type bucketCount struct {
	Bucket int64 `json:"bucket"` // unix ms of the minute
	Count  int64 `json:"count"`
}

func (a *app) counterStub(r *http.Request) (*core.Stub[*counter.Counter], string, error) {
	link, err := nameParam(r, "link", "demo")
	if err != nil {
		return nil, "", err
	}
	stub, err := a.counters.Get(link)
	return stub, link, err
}

func (a *app) counterRecord(r *http.Request) (any, error) {
	n, err := intParam(r, "n", 1, 1, 1000)
	if err != nil {
		return nil, err
	}
	stub, link, err := a.counterStub(r)
	if err != nil {
		return nil, err
	}
	return a.m.record(r.Context(), stub, counterHits{Link: link, N: n})
}

func (a *app) counterStats(r *http.Request) (any, error) {
	stub, link, err := a.counterStub(r)
	if err != nil {
		return nil, err
	}
	return a.m.counted(r.Context(), stub, link)
}

func counterInto(ctx context.Context, c *counter.Counter, ans *counterAnswer) error {
	var err error
	if ans.Total, err = c.Total(ctx); err != nil {
		return err
	}
	at, ok, err := c.FlushAt(ctx)
	if err == nil && ok {
		ms := at.UnixMilli()
		ans.FlushAt = &ms
	}
	return err
}

// Rooms (the original, R1-R11).

// room serves /room/{name}: a WebSocket upgrade joins the room (the
// room's own Fetch); a plain GET or HEAD answers its state. Errors are
// JSON, as everywhere in the API.
func (a *app) room(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/room/")
	if name == "" || strings.Contains(name, "/") {
		writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no route %s %s; a room is /room/{name}, GET /routes lists the API", r.Method, clipPath(r.URL.Path))})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("/room/{name} takes GET, not %s", r.Method)})
		return
	}
	stub, err := a.rooms.Get(name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("bad room name %s: %v", clip(name), err)})
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		jw := &jsonErrors{ResponseWriter: w}
		stub.ServeHTTP(jw, r)
		jw.finish()
		return
	}
	ans, err := a.m.roomState(r.Context(), stub, struct{}{})
	if err != nil {
		writeError(w, err)
		return
	}
	if ans.Node != "" { // cluster mode: where to join the room
		setOwnerHeaders(w.Header(), ans.Node, ans.Address)
	}
	writeJSON(w, http.StatusOK, ans.State)
}

// jsonErrors answers an error that a WebSocket handshake writes as text
// (gorilla's: not a WebSocket request, a foreign Origin; the room's: a bad
// name or since) as every other error of the API: JSON, with the same
// status and headers. Everything else, the upgrade included, goes through.
type jsonErrors struct {
	http.ResponseWriter
	status int          // the error status held back, 0 if none
	msg    bytes.Buffer // its text, at most maxErrorText bytes
}

// maxErrorText bounds the text of an error kept for its JSON.
const maxErrorText = 1 << 10

func (j *jsonErrors) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(j.Header().Get("Content-Type"), "text/plain") {
		j.status = code
		return
	}
	j.ResponseWriter.WriteHeader(code)
}

func (j *jsonErrors) Write(p []byte) (int, error) {
	if j.status == 0 {
		return j.ResponseWriter.Write(p)
	}
	j.msg.Write(p[:min(len(p), max(0, maxErrorText-j.msg.Len()))])
	return len(p), nil
}

func (j *jsonErrors) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := j.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("cookbook: the connection cannot be hijacked")
	}
	return hj.Hijack()
}

func (j *jsonErrors) Unwrap() http.ResponseWriter { return j.ResponseWriter }

// finish writes the error held back, if any. Gorilla's text is the
// status's alone: the answer says what a handshake needs.
func (j *jsonErrors) finish() {
	if j.status == 0 {
		return
	}
	msg := strings.TrimSpace(j.msg.String())
	if msg == http.StatusText(j.status) {
		msg = fmt.Sprintf("WebSocket handshake refused: %s (an upgrade needs Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key; a browser's Origin must be the server's)", msg)
	}
	// A 421's headers (set by the Stub) name the owner: so does the body.
	h := j.Header()
	writeJSON(j.ResponseWriter, j.status, errorBody{Error: msg, Owner: h.Get(core.OwnerHeader), OwnerAddress: h.Get(core.OwnerAddressHeader)})
}
