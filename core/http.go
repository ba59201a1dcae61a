package core

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
)

// Fetcher is implemented by objects that serve HTTP requests, as a Durable Object's fetch does;
// Stub.ServeHTTP runs Fetch as one turn. The response is output-gated: what Fetch writes to w is
// buffered and sent once the turn's writes are durable; if Fetch returns an error or panics, the
// turn is rolled back and the client gets a bare 500 (the error is logged, not shown). A WebSocket
// upgrade (State.AcceptWebSocket) is the exception: its 101 leaves at once.
type Fetcher interface {
	Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error
}

// The headers of a 421 (Misdirected Request) answered in cluster mode for an object another node
// owns: the owner's Replication.Node and, if it advertises one, its Replication.Advertise.
const (
	OwnerHeader        = "Durable-Owner"
	OwnerAddressHeader = "Durable-Owner-Address"
)

// ServeHTTP routes an HTTP request to the object, so a Stub is an http.Handler: it runs Fetch as a
// turn queued behind the calls and events before it. An object that is not a Fetcher answers 501; a
// full queue answers 503 with Retry-After, a closed runtime 503. In cluster mode, an object another
// node owns (or took over during the turn) answers 421, one whose lease cannot be proven 503. A 421
// for an object whose owner is known names the owner node and its advertised address in the
// headers Durable-Owner and Durable-Owner-Address and in its body.
func (s *Stub[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var zero T
	if _, ok := any(zero).(Fetcher); !ok {
		http.Error(w, "object does not serve HTTP", http.StatusNotImplemented)
		return
	}
	if s.ns.rt.router.relays() { // cluster mode: at the owner, wherever it is (relay.go)
		s.serveHTTPRouted(w, r)
		return
	}
	g := &gatedResponse{w: w, header: make(http.Header)}
	err := s.call(r.Context(), new(turn), codeFunc(func(ctx context.Context, inst any) error {
		if err := inst.(Fetcher).Fetch(ctx, g, r); err != nil {
			return err
		}
		// The response is the turn's output: it leaves with its commit.
		ctx.(*turn).emit(effect{fn: func(committed bool) {
			if committed {
				g.flush()
			}
		}})
		return nil
	}))
	g.finish(err, s.ns)
}

// flush sends the buffered response.
func (g *gatedResponse) flush() {
	if g.hijacked || g.sent { // a WebSocket upgrade has answered already
		return
	}
	maps.Copy(g.w.Header(), g.header)
	if g.status == 0 {
		g.status = http.StatusOK
	}
	g.w.WriteHeader(g.status)
	g.w.Write(g.body.Bytes())
	g.sent = true
}

// gatedResponse buffers a response until its turn is durable; Hijack goes through (for upgrades).
type gatedResponse struct {
	w              http.ResponseWriter
	header         http.Header
	status         int
	body           bytes.Buffer
	hijacked, sent bool
}

func (g *gatedResponse) Header() http.Header { return g.header }

func (g *gatedResponse) WriteHeader(code int) {
	if g.status == 0 {
		g.status = code
	}
}

func (g *gatedResponse) Write(p []byte) (int, error) {
	if g.hijacked {
		return 0, http.ErrHijacked
	}
	if g.status == 0 {
		g.status = http.StatusOK
	}
	return g.body.Write(p)
}

func (g *gatedResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := g.w.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("core: the response writer cannot be hijacked")
	}
	nc, brw, err := hj.Hijack()
	if err == nil {
		g.hijacked = true
	}
	return nc, brw, err
}

// finish sends the buffered response (a failed handshake's too) or, if the turn failed, an error.
func (g *gatedResponse) finish(err error, ns *namespace) {
	switch {
	case g.hijacked || g.sent:
		return
	case err == nil || errors.Is(err, ErrBadHandshake) && g.status != 0:
		g.flush()
		return
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrOverloaded):
		code = http.StatusServiceUnavailable
		g.w.Header().Set("Retry-After", "1")
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	case errors.Is(err, ErrNotOwner), errors.Is(err, ErrFenced): // cluster mode: another node serves the object
		code = http.StatusMisdirectedRequest
		if noe := (*NotOwnerError)(nil); errors.As(err, &noe) && noe.Holder != "" {
			setOwnerHeaders(g.w.Header(), noe)
			http.Error(g.w, fmt.Sprintf("%s: %v", http.StatusText(code), noe), code)
			return
		}
	case errors.Is(err, ErrLeaseUnproven):
		code = http.StatusServiceUnavailable
		g.w.Header().Set("Retry-After", "1")
	default:
		ns.rt.log.Error("fetch failed", "event", "fetch_failed", "namespace", ns.name, "error", err)
	}
	http.Error(g.w, http.StatusText(code), code)
}

// setOwnerHeaders sets, on the headers of a 421, Durable-Owner to the node that owns the object and
// Durable-Owner-Address to its advertised address, if known: where the client should send the
// request.
func setOwnerHeaders(h http.Header, e *NotOwnerError) {
	h.Set(OwnerHeader, e.Holder)
	if e.Address != "" {
		h.Set(OwnerAddressHeader, e.Address)
	}
}
