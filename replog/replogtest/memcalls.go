package replogtest

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/durable-go/durable/replog"
)

// MemMaxCallBytes is the longest request or reply a MemCluster carries unless WithMaxCallBytes
// says otherwise.
const MemMaxCallBytes = 1 << 20

// memCalls is a MemCluster's request-reply: the node names served, and by which view.
type memCalls struct {
	mu      sync.Mutex
	max     int
	servers map[string]*memServer
}

// memServer is one Serve: its handler, the view that serves, and the calls under way.
type memServer struct {
	view    *MemNode
	handle  func(context.Context, []byte) []byte
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex // guards stopped and the Add of calls
	stopped bool
	calls   sync.WaitGroup
}

// WithMaxCallBytes sets the longest request or reply the engine's Calls carry, and returns c.
func (c *MemCluster) WithMaxCallBytes(n int) *MemCluster {
	c.calls.mu.Lock()
	c.calls.max = n
	c.calls.mu.Unlock()
	return c
}

func (m *memCalls) maxBytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.max == 0 {
		return MemMaxCallBytes
	}
	return m.max
}

// CutCalls cuts the node's links for requests (cut true) or joins them back: requests it sends, and
// requests sent to it, are not delivered (replog.ErrUnreachable), as behind a cut link.
func (n *MemNode) CutCalls(cut bool) { n.mu.Lock(); n.callsCut = cut; n.mu.Unlock() }

// LoseReplies makes the replies to the node's next k requests served get lost on their way back:
// the request is handled, and its sender gets replog.ErrNoReply at once (without waiting out its
// context), as one whose reply never came.
func (n *MemNode) LoseReplies(k int) { n.mu.Lock(); n.lostReply = k; n.mu.Unlock() }

// Calls is the node's view of the engine's request-reply: requests are handled in the process, on
// a goroutine of their own, as a network transport would.
func (n *MemNode) Calls() replog.Calls { return memCallsView{n} }

type memCallsView struct{ n *MemNode }

func (v memCallsView) MaxCallBytes() int { return v.n.c.calls.maxBytes() }

func (v memCallsView) Serve(node string, handle func(context.Context, []byte) []byte) (func(), error) {
	m := &v.n.c.calls
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.servers == nil {
		m.servers = map[string]*memServer{}
	}
	if _, dup := m.servers[node]; dup {
		return nil, fmt.Errorf("replogtest: node %q is served already", node)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &memServer{view: v.n, handle: handle, ctx: ctx, cancel: cancel}
	m.servers[node] = s
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			if m.servers[node] == s {
				delete(m.servers, node)
			}
			m.mu.Unlock()
			s.mu.Lock()
			s.stopped = true
			s.mu.Unlock()
			cancel()
		})
		s.calls.Wait()
	}, nil
}

func (v memCallsView) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	m := &v.n.c.calls
	if max := m.maxBytes(); len(req) > max {
		return nil, fmt.Errorf("replogtest: a request of %d bytes: at most %d: %w", len(req), max, replog.ErrCallTooLarge)
	}
	v.n.mu.Lock()
	cut := v.n.callsCut
	v.n.mu.Unlock()
	m.mu.Lock()
	s := m.servers[node]
	m.mu.Unlock()
	if cut || s == nil {
		return nil, fmt.Errorf("replogtest: request to node %q: %w", node, replog.ErrUnreachable)
	}
	s.view.mu.Lock()
	cut = s.view.callsCut
	lose := s.view.lostReply > 0
	if lose && !cut {
		s.view.lostReply--
	}
	s.view.mu.Unlock()
	s.mu.Lock()
	if cut || s.stopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("replogtest: request to node %q: %w", node, replog.ErrUnreachable)
	}
	s.calls.Add(1)
	s.mu.Unlock()
	type result struct{ reply []byte }
	done := make(chan result, 1)
	go func() {
		defer s.calls.Done()
		done <- result{s.handle(s.ctx, bytes.Clone(req))}
	}()
	select {
	case r := <-done:
		switch {
		case lose:
			return nil, fmt.Errorf("replogtest: request to node %q: the reply was lost: %w", node, replog.ErrNoReply)
		case len(r.reply) > m.maxBytes():
			return nil, fmt.Errorf("replogtest: a reply of %d bytes from node %q: at most %d: %w", len(r.reply), node, m.maxBytes(), replog.ErrCallTooLarge)
		}
		return r.reply, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("replogtest: request to node %q: %w: %w", node, replog.ErrNoReply, ctx.Err())
	}
}
