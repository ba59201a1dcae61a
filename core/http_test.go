package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// page is an object that serves HTTP: it counts its hits in storage.
type page struct{ st *core.State }

func newPage(ctx context.Context, st *core.State) (*page, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS hits(n INTEGER NOT NULL)")
	return &page{st: st}, err
}

func (p *page) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if _, err := p.st.Storage().Exec(ctx, "INSERT INTO hits VALUES (1)"); err != nil {
		return err
	}
	var n int
	if err := p.st.Storage().QueryRow(ctx, "SELECT count(*) FROM hits").Scan(&n); err != nil {
		return err
	}
	w.Header().Set("X-Hits", "counted")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, p.st.Name()+" ")
	if r.URL.Query().Get("fail") != "" {
		return errors.New("half a response") // rolled back: nothing of it leaves
	}
	io.WriteString(w, "hit")
	return nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestStub_ServeHTTP(t *testing.T) {
	rt := openRT(t, core.Options{Logger: quietLogger()})
	pages, err := core.Register(rt, "pages", newPage)
	require.NoError(t, err)
	stub, err := pages.Get("home")
	require.NoError(t, err)

	for _, tc := range []struct {
		query      string
		wantStatus int
		wantBody   string
	}{
		{"", http.StatusCreated, "home hit"},
		{"fail=1", http.StatusInternalServerError, "Internal Server Error\n"},
		{"", http.StatusCreated, "home hit"},
	} {
		rec := httptest.NewRecorder()
		stub.ServeHTTP(rec, httptest.NewRequest("GET", "/?"+tc.query, nil))
		require.Equal(t, tc.wantStatus, rec.Code, "query %q", tc.query)
		require.Equal(t, tc.wantBody, rec.Body.String(), "query %q", tc.query)
	}
	n, err := core.Call(context.Background(), stub, func(ctx context.Context, p *page) (int, error) {
		var n int
		err := p.st.Storage().QueryRow(ctx, "SELECT count(*) FROM hits").Scan(&n)
		return n, err
	})
	require.NoError(t, err)
	require.Equal(t, 2, n, "the failed request's write was rolled back")

	// An object without Fetch answers 501.
	items := register(t, rt)
	rec := httptest.NewRecorder()
	get(t, items, "x").ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	require.Equal(t, http.StatusNotImplemented, rec.Code)

	// A closed runtime answers 503.
	require.NoError(t, rt.Close())
	rec = httptest.NewRecorder()
	stub.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

// A WebSocket upgrade needs a connection to hijack.
func TestAcceptWebSocket_NeedsHijack(t *testing.T) {
	rt, ns, _ := registerChat(t, core.Options{})
	_ = rt
	stub, err := ns.Get("r")
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "/chat/r", nil)
	req.Header.Set("Connection", "upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	req.Header.Set("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	rec := httptest.NewRecorder()
	stub.ServeHTTP(rec, req)
	require.Equal(t, http.StatusInternalServerError, rec.Code)
}
