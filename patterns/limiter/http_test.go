package limiter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
	"github.com/stretchr/testify/require"
)

// request is one request sent through the middleware and what it should get.
type request struct {
	wait       time.Duration // on the fake clock, before sending
	remoteAddr string
	header     http.Header
	code       int
	want       http.Header // headers that must be present with these values
	absent     []string    // headers that must be absent
}

// serve runs the script against h in a synctest bubble and checks that
// next ran for exactly the requests answered 200.
func serve(t *testing.T, h *limiter.HTTP, script []request) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		h.Limiters = mustRegister(t, mustOpen(t))
		reached := 0
		handler := h.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached++
			w.Write([]byte("ok"))
		}))
		want200 := 0
		for i, req := range script {
			time.Sleep(req.wait)
			r := httptest.NewRequest("GET", "/", nil)
			if req.remoteAddr != "" {
				r.RemoteAddr = req.remoteAddr
			}
			for k, vs := range req.header {
				r.Header[k] = vs
			}
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			require.Equal(t, req.code, w.Code, "request %d: status (body %q)", i, w.Body.String())
			for k := range req.want {
				require.Equal(t, req.want.Get(k), w.Header().Get(k), "request %d: header %s", i, k)
			}
			for _, k := range req.absent {
				require.Empty(t, w.Header().Values(k), "request %d: header %s", i, k)
			}
			if req.code == http.StatusOK {
				want200++
			}
		}
		require.Equal(t, want200, reached, "requests that reached the handler")
	})
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// S-L1 over HTTP: limit 2 per 10 s. Passing requests carry the RateLimit
// headers; refused ones get 429, Retry-After in whole seconds rounded up,
// and never reach the handler; other clients are not affected.
func TestHTTP_Middleware_StatusAndHeaders(t *testing.T) {
	const alice, bob = "192.0.2.1:1234", "192.0.2.2:5678"
	serve(t, &limiter.HTTP{Limit: 2, Window: 10 * time.Second}, []request{
		{remoteAddr: alice, code: 200, want: hdr("RateLimit-Limit", "2", "RateLimit-Remaining", "1", "RateLimit-Reset", "10"), absent: []string{"Retry-After"}},
		{remoteAddr: alice, code: 200, want: hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "10"), absent: []string{"Retry-After"}},
		{remoteAddr: alice, code: 429, want: hdr("RateLimit-Limit", "2", "RateLimit-Remaining", "0", "RateLimit-Reset", "10", "Retry-After", "10")},
		{remoteAddr: bob, code: 200, want: hdr("RateLimit-Remaining", "1")},
		{wait: 3500 * time.Millisecond, remoteAddr: alice, code: 429, want: hdr("Retry-After", "7", "RateLimit-Reset", "7")},
		{wait: 6500 * time.Millisecond, remoteAddr: alice, code: 200, want: hdr("RateLimit-Remaining", "1", "RateLimit-Reset", "10")},
		// Another port, same address: same client.
		{remoteAddr: "192.0.2.1:9999", code: 200, want: hdr("RateLimit-Remaining", "0")},
		{remoteAddr: "192.0.2.1:9999", code: 429},
	})
}

// A proxy's header is honoured only when configured, and then only its
// last address, the one the proxy added.
func TestHTTP_Middleware_TrustedProxyHeader(t *testing.T) {
	const proxy = "10.0.0.1:40000"
	xff := func(v string) http.Header { return hdr("X-Forwarded-For", v) }

	t.Run("not configured", func(t *testing.T) {
		// Every request comes from the proxy's address: one shared key,
		// whatever the header says.
		serve(t, &limiter.HTTP{Limit: 1, Window: time.Minute}, []request{
			{remoteAddr: proxy, header: xff("198.51.100.1"), code: 200},
			{remoteAddr: proxy, header: xff("198.51.100.2"), code: 429},
		})
	})
	t.Run("not configured, spoofed", func(t *testing.T) {
		// A client cannot escape its limit by sending the header itself.
		serve(t, &limiter.HTTP{Limit: 1, Window: time.Minute}, []request{
			{remoteAddr: "203.0.113.9:1", header: xff("198.51.100.1"), code: 200},
			{remoteAddr: "203.0.113.9:1", header: xff("198.51.100.2"), code: 429},
		})
	})
	t.Run("configured", func(t *testing.T) {
		serve(t, &limiter.HTTP{Limit: 1, Window: time.Minute, TrustedProxyHeader: "X-Forwarded-For"}, []request{
			{remoteAddr: proxy, header: xff("198.51.100.1"), code: 200},
			{remoteAddr: proxy, header: xff("198.51.100.2"), code: 200},
			{remoteAddr: proxy, header: xff("198.51.100.1"), code: 429},
			// The client wrote the first entries; the proxy appended the last.
			{remoteAddr: proxy, header: xff("1.1.1.1, 2.2.2.2, 198.51.100.1"), code: 429},
			{remoteAddr: proxy, header: http.Header{"X-Forwarded-For": {"198.51.100.3", "5.5.5.5, 198.51.100.2"}}, code: 429},
			// No valid address in the header: keyed by RemoteAddr.
			{remoteAddr: proxy, header: xff("unknown"), code: 200},
			{remoteAddr: proxy, code: 429},
			// An address with a port is still an address.
			{remoteAddr: proxy, header: xff("198.51.100.4:5555"), code: 200},
			{remoteAddr: proxy, header: xff("198.51.100.4"), code: 429},
		})
	})
}

// IPv6 clients are keyed by their /64: a client cannot take a fresh limit
// by taking a fresh address.
func TestHTTP_Middleware_IPv6Prefix(t *testing.T) {
	serve(t, &limiter.HTTP{Limit: 1, Window: time.Minute}, []request{
		{remoteAddr: "[2001:db8:1:2::1]:443", code: 200},
		{remoteAddr: "[2001:db8:1:2:ffff::9]:443", code: 429},
		{remoteAddr: "[2001:db8:1:3::1]:443", code: 200},
		{remoteAddr: "[::ffff:192.0.2.1]:80", code: 200},
		{remoteAddr: "192.0.2.1:80", code: 429},
	})
}

// A custom Key replaces the client address; a key that is not a valid
// object name gets 400.
func TestHTTP_Middleware_CustomKey(t *testing.T) {
	token := func(r *http.Request) string { return r.Header.Get("Authorization") }
	serve(t, &limiter.HTTP{Limit: 1, Window: time.Minute, Key: token}, []request{
		{remoteAddr: "192.0.2.1:1", header: hdr("Authorization", "token-a"), code: 200},
		{remoteAddr: "192.0.2.2:1", header: hdr("Authorization", "token-a"), code: 429},
		{remoteAddr: "192.0.2.1:1", header: hdr("Authorization", "token-b"), code: 200},
		{remoteAddr: "192.0.2.1:1", code: 400, absent: []string{"RateLimit-Limit"}},
	})
}

// When the limiter cannot answer, the request gets 503 and does not reach
// the handler; nothing panics.
func TestHTTP_Middleware_Unavailable(t *testing.T) {
	rt, err := core.Open(core.Options{})
	require.NoError(t, err)
	keys, err := core.Register(rt, "ratelimit", limiter.New)
	require.NoError(t, err)
	require.NoError(t, rt.Close())

	h := &limiter.HTTP{Limiters: keys, Limit: 5, Window: time.Minute}
	handler := h.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler was reached")
	}))
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Contains(t, w.Body.String(), "limiter: rate limiter unavailable")
}

// A misconfigured HTTP panics when wired, not when serving.
func TestHTTP_Middleware_PanicsOnBadConfig(t *testing.T) {
	keys := mustRegister(t, mustOpen(t))
	next := http.NotFoundHandler()
	for name, h := range map[string]*limiter.HTTP{
		"no limiters": {Limit: 1, Window: time.Second},
		"limit 0":     {Limiters: keys, Window: time.Second},
		"no window":   {Limiters: keys, Limit: 1},
	} {
		require.Panics(t, func() { h.Middleware(next) }, name)
	}
}
