package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/durable-go/durable/core"
)

// maxBody bounds a request body. The API takes its parameters from the
// query string or a small form; nothing needs more.
const maxBody = 64 << 10

// httpError is an error answered with its own status and message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// badParam reports a query parameter that is missing or wrong: which one,
// what it should be, and what came (clipped).
func badParam(name, want, got string) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf("bad parameter %s: want %s, got %s", name, want, clip(got))}
}

// maxEcho is how many bytes of a value an error message quotes.
const maxEcho = 64

// clip quotes s for an error message, cut to maxEcho bytes (on a rune
// boundary) with its length when it is longer: a 5,000-byte name is not
// echoed back whole.
func clip(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:echoCut(s)]), len(s))
}

// clipPath is clip for a path, which needs no quotes.
func clipPath(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:echoCut(s)], len(s))
}

// echoCut is where clip cuts s: at most maxEcho bytes, on a rune boundary.
func echoCut(s string) int {
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

// apiFunc answers a request with a value to encode as JSON, or an error.
type apiFunc func(r *http.Request) (any, error)

// route is one endpoint of the API.
type route struct {
	method string
	path   string
	doc    string
	fn     apiFunc
}

// router serves the API's routes with JSON answers, the rooms under
// /room/, and the page at /. Unknown paths answer 404 and wrong methods 405,
// in JSON. HEAD is answered as GET, without the body.
type router struct {
	routes map[string]route
	rooms  http.Handler // /room/{name}; answers its own errors in JSON
	page   http.Handler // exactly /
	insp   http.Handler // exactly /inspect: the inspector's page
	extra  []route      // served beside the router (GET /metrics), listed in /routes
	log    *slog.Logger
}

// Routes that are not in routes, for GET /routes.
var (
	pageRoute    = route{method: "GET", path: "/", doc: "the live page: a room, the alarm timeline, the limiter, the inventory race"}
	inspRoute    = route{method: "GET", path: "/inspect", doc: "the inspector: namespaces, objects, one object's tables, rows, alarm, timers, dead letters and WebSockets (read-only)"}
	roomRoute    = route{method: "GET", path: "/room/{name}", doc: "a room: a WebSocket upgrade joins it (?name=&since=), a plain GET shows its offset and members"}
	metricsRoute = route{method: "GET", path: "/metrics", doc: "the runtime's metrics, in Prometheus's text format"}
	healthzRoute = route{method: "GET", path: "/healthz", doc: "200 while the server runs"}
	readyzRoute  = route{method: "GET", path: "/readyz", doc: "200 once the server can serve calls; 503 saying why not (cluster mode: until the node hears the others and its engine answers; while it drains)"}
)

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		w = headWriter{w}
	}
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case r.URL.Path == "/" && get:
		rt.page.ServeHTTP(w, r)
		return
	case r.URL.Path == "/":
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("/ takes GET, not %s", r.Method)})
		return
	case r.URL.Path == "/inspect" && get && rt.insp != nil:
		rt.insp.ServeHTTP(w, r)
		return
	case strings.HasPrefix(r.URL.Path, "/room/") && rt.rooms != nil:
		rt.rooms.ServeHTTP(w, r)
		return
	}
	ro, ok := rt.routes[r.URL.Path]
	if !ok {
		writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no route %s %s; GET / serves the page, GET /routes lists the API", r.Method, clipPath(r.URL.Path))})
		return
	}
	if r.Method != ro.method && !(r.Method == http.MethodHead && ro.method == http.MethodGet) {
		allow := ro.method
		if ro.method == http.MethodGet {
			allow = "GET, HEAD"
		}
		w.Header().Set("Allow", allow)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("%s takes %s, not %s", ro.path, ro.method, r.Method)})
		return
	}
	if err := r.ParseForm(); err != nil { // the body is bounded by withLimits
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("request body over the limit of %d bytes", tooLarge.Limit)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad form: " + err.Error()})
		return
	}
	v, err := ro.fn(r)
	if err != nil {
		if status := writeError(w, err); status == http.StatusInternalServerError {
			rt.log.Error("request failed", "event", "request_failed", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// list returns the routes in path order, for GET /routes: the API's, the
// page and the rooms.
func (rt *router) list() []map[string]string {
	var out []map[string]string
	all := []route{pageRoute}
	if rt.insp != nil {
		all = append(all, inspRoute)
	}
	if rt.rooms != nil {
		all = append(all, roomRoute)
	}
	all = append(all, rt.extra...)
	for _, ro := range rt.routes {
		all = append(all, ro)
	}
	for _, ro := range all {
		out = append(out, map[string]string{"method": ro.method, "path": ro.path, "doc": ro.doc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["path"] < out[j]["path"] })
	return out
}

// errorBody is an error's JSON answer. In cluster mode, a call for an
// object another node owns (421) names that node and where it serves.
type errorBody struct {
	Error        string `json:"error"`
	Owner        string `json:"owner,omitempty"`
	OwnerAddress string `json:"ownerAddress,omitempty"`
}

// writeError answers err in JSON, with its status (errorStatus), and
// returns the status. A refusal naming the object's owner (421) names it
// in the body and in the headers Durable-Owner and Durable-Owner-Address.
func writeError(w http.ResponseWriter, err error) int {
	status, msg := errorStatus(err)
	body := errorBody{Error: msg}
	if noe := (*core.NotOwnerError)(nil); errors.As(err, &noe) && noe.Holder != "" {
		setOwnerHeaders(w.Header(), noe.Holder, noe.Address)
		body.Owner, body.OwnerAddress = noe.Holder, noe.Address
	}
	writeJSON(w, status, body)
	return status
}

// headWriter answers HEAD: the status and headers of GET, no body.
type headWriter struct{ http.ResponseWriter }

func (headWriter) Write(p []byte) (int, error) { return len(p), nil }

func (h headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// errorStatus maps an error to its status and message.
func errorStatus(err error) (int, string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.Is(err, core.ErrInvalidName):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, core.ErrOverloaded), errors.Is(err, core.ErrClosed):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, core.ErrNotOwner), errors.Is(err, core.ErrFenced):
		// Cluster mode: another node serves the object (the message names it).
		return http.StatusMisdirectedRequest, err.Error()
	case errors.Is(err, core.ErrLeaseUnproven), errors.Is(err, core.ErrUnreachable):
		// Retryable: the lease, or the owner's node, may answer soon.
		return http.StatusServiceUnavailable, err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

// writeJSON answers v laid out as the original's transcripts are (origJSON).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := origJSON(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error": "cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// withLimits bounds request bodies and turns a panic in a handler into a
// logged 500 JSON answer, so that no request can bring the server down or
// leave a client with a reset connection.
func withLimits(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(tw, r.Body, maxBody)
		}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p) // the server's own signal to drop the connection
			}
			log.Error("handler panicked", "event", "panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if !tw.wrote && !tw.hijacked {
				writeJSON(tw, http.StatusInternalServerError, errorBody{Error: "internal error: the handler panicked (logged)"})
			}
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter remembers whether a response has started, and passes
// Hijack (WebSocket upgrades) and Flush through.
type trackingWriter struct {
	http.ResponseWriter
	wrote, hijacked bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(p)
}

func (t *trackingWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		t.wrote = true
		f.Flush()
	}
}

func (t *trackingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := t.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("cookbook: the connection cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err == nil {
		t.hijacked = true
	}
	return c, brw, err
}

func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Parameters. Each returns a *httpError naming the parameter when it is
// wrong.

// intParam reads an integer from lo to hi, def when absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	s := r.Form.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badParam(name, fmt.Sprintf("an integer from %d to %d", lo, hi), s)
	}
	return n, nil
}

// durationParam reads a Go duration ("1ms", "60s") from lo to hi, def when
// absent.
func durationParam(r *http.Request, name string, def, lo, hi time.Duration) (time.Duration, error) {
	s := r.Form.Get(name)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		return 0, badParam(name, fmt.Sprintf("a duration from %s to %s, like %s or %s", shortDuration(lo), shortDuration(hi), shortDuration(lo), shortDuration(hi)), s)
	}
	return d, nil
}

// shortDuration is d as time.ParseDuration reads it, without the zero
// units Duration.String adds: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// nameParam reads an object name: 1 to core.MaxNameLen bytes of UTF-8.
func nameParam(r *http.Request, name, def string) (string, error) {
	s := r.Form.Get(name)
	if _, ok := r.Form[name]; !ok {
		s = def
	}
	if s == "" || len(s) > core.MaxNameLen || !utf8.ValidString(s) {
		return "", badParam(name, fmt.Sprintf("an object name of 1 to %d bytes of UTF-8", core.MaxNameLen), s)
	}
	return s, nil
}

// boolParam reads 1/0/true/false, def when absent.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	s := r.Form.Get(name)
	if s == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParam(name, "true or false (1 or 0)", s)
	}
	return b, nil
}

// origJSON encodes v as the original's transcripts show JSON: an object's keys
// one per line, the elements of an array of objects one per line, and
// everything deeper on one line.
//
//	{
//	  "results": [
//	    {"armedNew": true, "alarmAt": 1785557630671},
//	    {"armedNew": false, "alarmAt": 1785557630671}
//	  ]
//	}
func origJSON(v any) ([]byte, error) {
	raw, err := marshal(v)
	if err != nil {
		return nil, err
	}
	keys, vals, ok := objectFields(raw)
	if !ok {
		return inlineJSON(raw), nil
	}
	var b bytes.Buffer
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.Write(k)
		b.WriteString(": ")
		var elems []json.RawMessage
		if json.Unmarshal(vals[i], &elems) == nil && len(elems) > 0 && bytes.HasPrefix(bytes.TrimSpace(elems[0]), []byte("{")) {
			b.WriteString("[")
			for j, e := range elems {
				if j > 0 {
					b.WriteString(",")
				}
				b.WriteString("\n    ")
				b.Write(inlineJSON(e))
			}
			b.WriteString("\n  ]")
			continue
		}
		b.Write(inlineJSON(vals[i]))
	}
	if len(keys) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("}")
	return b.Bytes(), nil
}

// marshal is json.Marshal without the HTML escapes: "?o=&n=5", not
// "?o=\u0026n=5". The answers are JSON, never embedded in HTML.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// inlineJSON lays out a JSON value on one line with a space after each
// colon and comma.
func inlineJSON(raw []byte) []byte {
	raw = bytes.TrimSpace(raw)
	if keys, vals, ok := objectFields(raw); ok {
		var b bytes.Buffer
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.Write(k)
			b.WriteString(": ")
			b.Write(inlineJSON(vals[i]))
		}
		b.WriteString("}")
		return b.Bytes()
	}
	var elems []json.RawMessage
	if len(raw) > 0 && raw[0] == '[' && json.Unmarshal(raw, &elems) == nil {
		var b bytes.Buffer
		b.WriteString("[")
		for i, e := range elems {
			if i > 0 {
				b.WriteString(", ")
			}
			b.Write(inlineJSON(e))
		}
		b.WriteString("]")
		return b.Bytes()
	}
	return raw
}

// objectFields splits a JSON object into its keys (quoted, as in the
// source) and values, in order.
func objectFields(raw []byte) (keys [][]byte, vals []json.RawMessage, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k, _ := marshal(tok)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, true
}

// setOwnerHeaders names, on a refusal or an answer about an object another node serves, the node
// that owns it and its advertised address (if known), as core's 421 does.
func setOwnerHeaders(h http.Header, node, addr string) {
	h.Set(core.OwnerHeader, node)
	if addr != "" {
		h.Set(core.OwnerAddressHeader, addr)
	}
}
