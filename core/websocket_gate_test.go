package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// WebSocket output goes through the gate of the turn whose ctx is passed
//: a send
// made in object B's turn to a socket held by object A leaves with B's
// commit and is dropped if B's turn fails; a ctx that marks no live turn
// (Background, an Await fn's, a turn that has ended) is ErrNotInTurn, and
// none of this races with the turns running meanwhile.

// holder is object A: it accepts WebSockets and hands them to the test.
type holder struct {
	st       *core.State
	accepted chan<- *core.WebSocket
}

func (h *holder) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	ws, err := h.st.AcceptWebSocket(ctx, w, r)
	if err != nil {
		return err
	}
	h.accepted <- ws
	return nil
}

// sender is object B: it has storage of its own, and no socket.
type sender struct{ st *core.State }

func newSender(ctx context.Context, st *core.State) (*sender, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS sent(msg TEXT)")
	return &sender{st: st}, err
}

func (s *sender) write(ctx context.Context, msg string) error {
	_, err := s.st.Storage().Exec(ctx, "INSERT INTO sent(msg) VALUES (?)", msg)
	return err
}

// wsFixture is A's socket, its client, and B.
type wsFixture struct {
	rt      *core.Runtime
	holder  *core.Stub[*holder]
	senders *core.Namespace[*sender]
	ws      *core.WebSocket // A's handle
	client  *websocket.Conn
	msgs    chan string // what the client received, in order; closed when it stops reading
}

func newWSFixture(t *testing.T) *wsFixture {
	t.Helper()
	f := &wsFixture{msgs: make(chan string, 1<<16)}
	f.rt = openRuntime(t, core.Options{WebSocketSendQueue: 1 << 16})
	accepted := make(chan *core.WebSocket, 1)
	hs, err := core.Register(f.rt, "holders", func(_ context.Context, st *core.State) (*holder, error) {
		return &holder{st: st, accepted: accepted}, nil
	})
	require.NoError(t, err)
	f.senders, err = core.Register(f.rt, "senders", newSender)
	require.NoError(t, err)
	f.holder, err = hs.Get("A")
	require.NoError(t, err)
	srv := httptest.NewServer(f.holder) // 127.0.0.1
	t.Cleanup(srv.Close)
	f.client, _, err = websocket.DefaultDialer.Dial("ws://"+strings.TrimPrefix(srv.URL, "http://")+"/", nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.client.Close() })
	var ok bool
	f.ws, ok = recvWithin(t, accepted, hangGuard, "A's accepted WebSocket")
	require.True(t, ok)
	go func() {
		defer close(f.msgs)
		for {
			_, data, err := f.client.ReadMessage()
			if err != nil {
				return
			}
			f.msgs <- string(data)
		}
	}()
	return f
}

// readUntil reads the client's messages until every one of want has come,
// and returns all it read. It fails the test after hangGuard.
func (f *wsFixture) readUntil(t *testing.T, want map[string]bool) []string {
	t.Helper()
	var got []string
	missing := len(want)
	deadline := time.After(hangGuard)
	for missing > 0 {
		select {
		case m, ok := <-f.msgs:
			if !ok {
				t.Fatalf("the client's connection ended with %d messages still missing", missing)
			}
			got = append(got, m)
			if want[m] {
				want[m] = false
				missing--
			}
		case <-deadline:
			t.Fatalf("the client got %d messages, %d of those wanted still missing after %v", len(got), missing, hangGuard)
		}
	}
	return got
}

func TestWebSocket_SendLeavesWithCallersTurn(t *testing.T) {
	f := newWSFixture(t)
	b, err := f.senders.Get("B")
	require.NoError(t, err)
	errPlanned := errors.New("planned failure")

	err = core.Do(context.Background(), b, func(ctx context.Context, s *sender) error {
		if err := s.write(ctx, "rolled-back"); err != nil {
			return err
		}
		if err := f.ws.Send(ctx, core.TextMessage("from B's failed turn")); err != nil {
			return fmt.Errorf("send from B's turn: %w", err)
		}
		return errPlanned
	})
	require.ErrorIs(t, err, errPlanned)
	err = core.Do(context.Background(), b, func(ctx context.Context, s *sender) error {
		if err := s.write(ctx, "kept"); err != nil {
			return err
		}
		return f.ws.Send(ctx, core.TextMessage("from B's good turn"))
	})
	require.NoError(t, err)
	// A commits a turn of its own too: a send held for A's commit would
	// leave now.
	require.NoError(t, core.Do(context.Background(), f.holder, func(ctx context.Context, _ *holder) error {
		return f.ws.Send(ctx, core.TextMessage("from A's turn"))
	}))

	got := f.readUntil(t, map[string]bool{"from B's good turn": true, "from A's turn": true})
	for _, m := range got {
		if m == "from B's failed turn" {
			t.Errorf("the client received %q: got %q, want it dropped with B's rolled-back turn", m, got)
		}
	}
	if got[0] != "from B's good turn" {
		t.Errorf("first message: got %q, want %q", got[0], "from B's good turn")
	}

	err = f.ws.Send(context.Background(), core.TextMessage("from no turn"))
	if !errors.Is(err, core.ErrNotInTurn) {
		t.Errorf("Send(context.Background()): got %v, want core.ErrNotInTurn", err)
	}
}

// Meant for go test -race: turns of A and of several B objects run at
// once, each sending to A's socket from its own turn; B's turns also try
// to send from inside their Await fn (with the fn's ctx and with the outer
// one), and at the end the test sends with the ctx of a B turn that has
// ended. Those must be ErrNotInTurn, without a data race on the object's
// current turn (the race detector fails the test).
func TestWebSocket_SendFromManyTurnsIsRaceFree(t *testing.T) {
	f := newWSFixture(t)
	const (
		workers = 4  // goroutines per object
		bs      = 3  // B objects
		rounds  = 25 // turns per goroutine
	)
	var (
		mu       sync.Mutex
		want     = map[string]bool{} // messages sent from a turn that committed
		notInErr []error             // what sends outside a live turn returned
		stale    atomic.Pointer[context.Context]
	)
	note := func(err error) {
		mu.Lock()
		notInErr = append(notInErr, err)
		mu.Unlock()
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { // A's own turns
			for i := range rounds {
				msg := fmt.Sprintf("A/%d/%d", w, i)
				err := core.Do(ctx, f.holder, func(ctx context.Context, _ *holder) error { return f.ws.Send(ctx, core.TextMessage(msg)) })
				if err != nil {
					t.Errorf("A's turn: %v", err)
					return
				}
				mu.Lock()
				want[msg] = true
				mu.Unlock()
			}
		})
		for bi := range bs {
			stub, err := f.senders.Get(fmt.Sprint("B", bi))
			require.NoError(t, err)
			wg.Go(func() { // B's turns
				for i := range rounds {
					msg := fmt.Sprintf("B%d/%d/%d", bi, w, i)
					err := core.Do(ctx, stub, func(ctx context.Context, s *sender) error {
						if err := s.write(ctx, msg); err != nil {
							return err
						}
						if err := f.ws.Send(ctx, core.TextMessage(msg)); err != nil {
							return err
						}
						stale.Store(&ctx)
						if i%2 == 1 {
							return nil
						}
						return s.st.Await(ctx, func(actx context.Context) error {
							note(f.ws.Send(actx, core.TextMessage("never: from an Await fn")))
							note(f.ws.Send(ctx, core.TextMessage("never: outer ctx inside Await")))
							return nil
						})
					})
					if err != nil {
						t.Errorf("B's turn: %v", err)
						return
					}
					mu.Lock()
					want[msg] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// The stale ctx marks an ended turn now.
	if p := stale.Load(); p != nil {
		note(f.ws.Send(*p, core.TextMessage("never: stale ctx after the turns")))
	}

	mu.Lock()
	wantCopy := make(map[string]bool, len(want))
	for m := range want {
		wantCopy[m] = true
	}
	errs := notInErr
	mu.Unlock()
	got := f.readUntil(t, wantCopy)
	for _, err := range errs {
		if !errors.Is(err, core.ErrNotInTurn) {
			t.Errorf("send outside a live turn: got %v, want core.ErrNotInTurn", err)
			break
		}
	}
	for _, m := range got {
		if m == "never: from an Await fn" || m == "never: outer ctx inside Await" || m == "never: stale ctx after the turns" {
			t.Errorf("the client received %q", m)
		}
	}
}
