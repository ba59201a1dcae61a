package limiter

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/durable-go/durable/core"
)

// HTTP rate-limits HTTP requests with one Limiter per client. Set
// Limiters, Limit and Window; the other fields may be left zero. Do not
// change the fields once Middleware has been called.
type HTTP struct {
	// Limiters is the namespace of limiters, one object per key, as
	// returned by core.Register(rt, name, New).
	Limiters *core.Namespace[*Limiter]

	// Limit is how many requests a key may make per Window.
	Limit  int
	Window time.Duration

	// Key returns the key a request counts against. It must return a valid
	// object name (see core.MaxNameLen); a request whose key is not one is
	// answered 400 Bad Request. nil means the client's IP address (for
	// IPv6, its /64 prefix), from RemoteAddr or TrustedProxyHeader.
	Key func(*http.Request) string

	// TrustedProxyHeader names a header in which a proxy in front of this
	// server puts the client's address, such as "X-Forwarded-For". It is
	// used only by the default Key, and only when set: leave it empty
	// unless every request comes through that proxy, since clients can
	// send the header themselves. The last address in the header is the
	// one used; a request without a valid one is keyed by RemoteAddr.
	TrustedProxyHeader string
}

// Middleware returns a handler that checks each request against its key's
// limit before passing it to next. Every answer carries RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset (seconds until a request frees
// up). A request over the limit is answered 429 Too Many Requests with
// Retry-After (seconds, rounded up) and does not reach next. If the
// limiter cannot answer (the object is overloaded, the runtime closed),
// the request is answered 503 Service Unavailable and does not reach next.
//
// Middleware panics if Limiters is nil, Limit is below 1 or Window is not
// positive: like http.Handle with a nil handler, that is a wiring mistake,
// found at start-up. Serving a request never panics.
func (h *HTTP) Middleware(next http.Handler) http.Handler {
	if h.Limiters == nil || h.Limit < 1 || h.Window <= 0 {
		panic("limiter: HTTP needs Limiters, a Limit of at least 1 and a positive Window")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, now, err := h.allow(r.Context(), r)
		switch {
		case errors.Is(err, core.ErrInvalidName):
			http.Error(w, "limiter: no valid rate-limit key for this request", http.StatusBadRequest)
			return
		case err != nil:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "limiter: rate limiter unavailable, retry later", http.StatusServiceUnavailable)
			return
		}
		hdr := w.Header()
		hdr.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
		hdr.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
		hdr.Set("RateLimit-Reset", seconds(d.ResetAt.Sub(now)))
		if !d.Allowed {
			hdr.Set("Retry-After", seconds(d.RetryAfter))
			http.Error(w, "limiter: too many requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allow checks r against its key's limiter, and returns the decision and
// the time it was made at, by the runtime's clock.
func (h *HTTP) allow(ctx context.Context, r *http.Request) (d Decision, now time.Time, err error) {
	key := h.clientIP
	if h.Key != nil {
		key = h.Key
	}
	stub, err := h.Limiters.Get(key(r))
	if err != nil {
		return Decision{}, time.Time{}, err
	}
	d, err = core.Call(ctx, stub, func(ctx context.Context, l *Limiter) (Decision, error) {
		now = l.st.Now() // the clock the window is kept by
		return l.AllowAt(ctx, now, h.Limit, h.Window)
	})
	return d, now, err
}

// clientIP is the default key: the client's address, from the last entry
// of TrustedProxyHeader if configured and valid, else from RemoteAddr.
func (h *HTTP) clientIP(r *http.Request) string {
	if h.TrustedProxyHeader != "" {
		if vs := r.Header.Values(h.TrustedProxyHeader); len(vs) > 0 {
			last := vs[len(vs)-1]
			last = strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:])
			if a, ok := parseAddr(last); ok {
				return addrKey(a)
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if a, ok := parseAddr(host); ok {
		return addrKey(a)
	}
	return host
}

// parseAddr parses an IP address, with or without a port.
func parseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	return netip.Addr{}, false
}

// addrKey is an IPv4 address as is, and an IPv6 address's /64 prefix.
func addrKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// seconds formats d as whole seconds, rounded up.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64((max(d, 0)+time.Second-1)/time.Second), 10)
}
