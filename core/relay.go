package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// HTTP from any node. In cluster mode with Replication.Calls, Stub.ServeHTTP at a node that does not
// own the object relays the request to the owner over the same calls as a Method (its method, URL,
// headers and body, up to Replication.MaxRelayBody) and writes the owner's response, which the
// owner sent once its turn's writes were durable. A WebSocket upgrade is relayed too, and the
// connection is then held here, its traffic relayed (wsrelay.go, wsedge.go). With
// Replication.NoHTTPRelay set, a request for an object another node owns is answered 421, naming it.

// wireHTTP is a relayed request.
type wireHTTP struct {
	Method     string      `json:"method"`
	URL        string      `json:"url"`
	Host       string      `json:"host,omitempty"`
	RemoteAddr string      `json:"remote,omitempty"`
	Header     http.Header `json:"header,omitempty"`
	Body       []byte      `json:"body,omitempty"`
	Socket     string      `json:"socket,omitempty"` // an upgrade: the id the edge gives the connection
}

// wireHTTPReply is its response.
type wireHTTPReply struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	Tags   []string    `json:"tags,omitempty"`   // an upgrade the object accepted: its tags
	Attach []byte      `json:"attach,omitempty"` // and its attachment as the accepting turn left it
}

// hopHeaders are not relayed: they describe one connection, not the request.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// touchedBody notes whether anything read a request's body.
type touchedBody struct {
	io.ReadCloser
	read bool
}

func (b *touchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.ReadCloser.Read(p)
}

// relays reports whether ServeHTTP may relay requests.
func (ro *router) relays() bool { return ro != nil && !ro.opts.noRelay }

// serveHTTPRouted is ServeHTTP in cluster mode with relaying: here if this node may serve the
// object, otherwise at its owner.
func (s *Stub[T]) serveHTTPRouted(w http.ResponseWriter, r *http.Request) {
	ro := s.ns.rt.router
	upgrade := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	var g *gatedResponse
	body := &touchedBody{ReadCloser: r.Body}
	if r.Body != nil {
		r.Body = body
	}
	rc := routedCall{ns: s.ns, name: s.name, method: "http",
		local: func(ctx context.Context) error {
			g = &gatedResponse{w: w, header: make(http.Header)}
			err := s.fetch(ctx, g, r)
			if errors.Is(err, ErrNotOwner) && !upgrade && !body.read && !g.hijacked && !g.sent {
				return err // not begun: relayed to the owner
			}
			g.finish(err, s.ns)
			return nil
		},
	}
	if upgrade { // the connection stays here, its traffic goes to the owner (wsedge.go)
		s.ns.rt.ws.relay.upgrade(w, r, s.ns, s.name)
		return
	}
	hr := &wireHTTP{Method: r.Method, URL: r.URL.String(), Host: r.Host, RemoteAddr: r.RemoteAddr, Header: r.Header.Clone()}
	for _, h := range hopHeaders {
		delete(hr.Header, h)
	}
	rc.encode = func() ([]byte, error) { return nil, nil }
	rc.http = hr
	// The body is read only when the request leaves this node: the first send encodes it.
	rc.readBody = func() error {
		if r.Body == nil || r.Body == http.NoBody {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(body.ReadCloser, ro.opts.maxBody+1))
		if err != nil {
			return err
		}
		if int64(len(b)) > ro.opts.maxBody {
			return fmt.Errorf("%w: a body over %d bytes cannot be relayed to the object's node", ErrTooLarge, ro.opts.maxBody)
		}
		hr.Body = b
		return nil
	}
	err := ro.call(r.Context(), &rc)
	switch {
	case err == nil && rc.httpReply != nil:
		h := w.Header()
		for k, v := range rc.httpReply.Header {
			h[k] = v
		}
		w.WriteHeader(rc.httpReply.Status)
		w.Write(rc.httpReply.Body)
	case err == nil: // served here
	case rc.bodyErr != nil && errors.Is(rc.bodyErr, ErrTooLarge):
		http.Error(w, http.StatusText(http.StatusRequestEntityTooLarge), http.StatusRequestEntityTooLarge)
	case errors.Is(err, ErrTooLarge):
		http.Error(w, "the object's response is too large to relay", http.StatusBadGateway)
	case errors.Is(err, ErrUnreachable):
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	default:
		if g == nil {
			g = &gatedResponse{w: w, header: make(http.Header)}
		}
		if !g.sent && !g.hijacked {
			g.finish(err, s.ns)
		}
	}
}

// fetch runs the object's Fetch as a turn, its response buffered in g until the turn's writes are
// durable.
func (s *Stub[T]) fetch(ctx context.Context, g *gatedResponse, r *http.Request) error {
	return s.call(ctx, new(turn), codeFunc(func(ctx context.Context, inst any) error {
		f, ok := inst.(Fetcher)
		if !ok {
			return errNotFetcher
		}
		if err := f.Fetch(ctx, g, r); err != nil {
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
}

// errNotFetcher is a relayed request's error for an object that does not serve HTTP.
var errNotFetcher = errors.New("core: object does not serve HTTP")

// serveHTTP serves a request another node relayed: Fetch as a turn here, its response recorded.
func (ro *router) serveHTTP(ctx context.Context, ns *namespace, w *wireCall) (*wireHTTPReply, error) {
	if err := validateName(w.Name); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, w.HTTP.Method, w.HTTP.URL, bytes.NewReader(w.HTTP.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: a relayed request: %w", ErrInvalidArgument, err)
	}
	req.Header, req.Host, req.RemoteAddr, req.RequestURI = w.HTTP.Header, w.HTTP.Host, w.HTTP.RemoteAddr, w.HTTP.URL
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.ContentLength = int64(len(w.HTTP.Body))
	req.Header.Set("Content-Length", strconv.Itoa(len(w.HTTP.Body)))
	var eu *edgeUpgrade
	if w.HTTP.Socket != "" { // an upgrade held at the edge: AcceptWebSocket registers it
		eu = &edgeUpgrade{edge: w.From, sock: w.HTTP.Socket}
		req = req.WithContext(context.WithValue(ctx, edgeKey{}, eu))
	}
	rec := &recordedResponse{header: http.Header{}}
	s := &Stub[any]{ns: ns, name: w.Name, id: objectID(ns.name, w.Name), place: topPlace(ns, w.Name, objectID(ns.name, w.Name))}
	g := &gatedResponse{w: rec, header: make(http.Header)}
	err = s.fetch(ctx, g, req)
	switch {
	case errors.Is(err, errNotFetcher):
		return &wireHTTPReply{Status: http.StatusNotImplemented, Body: []byte("object does not serve HTTP\n")}, nil
	case err != nil && !g.sent:
		return nil, err
	case eu != nil && eu.ws != nil && err == nil:
		att, _ := eu.ws.Attachment()
		return &wireHTTPReply{Status: http.StatusSwitchingProtocols, Tags: eu.ws.tags, Attach: att}, nil
	}
	return &wireHTTPReply{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}, nil
}

// recordedResponse keeps a response to send it back to the relaying node.
type recordedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recordedResponse) Header() http.Header { return r.header }
func (r *recordedResponse) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recordedResponse) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
