package coretest

import (
	"context"
	"net"
	"sync"
)

// PipeListener is a net.Listener over net.Pipe. Serve HTTP (and WebSockets) on it and dial it with
// Dial, and the server and its clients can talk inside a testing/synctest bubble, where a real
// socket would not count as durably blocked:
//
//	l := coretest.NewPipeListener()
//	srv := &http.Server{Handler: h}
//	go srv.Serve(l)
//	dialer := websocket.Dialer{NetDialContext: l.Dial}
//	conn, _, err := dialer.Dial("ws://pipe/room/lobby", nil)
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewPipeListener returns a listener ready to accept.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections already made stay open.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns a placeholder address.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects a client to the listener. Its signature is that of net.Dialer.DialContext, so it
// fits http.Transport.DialContext and websocket.Dialer.NetDialContext; network and address are
// ignored.
func (l *PipeListener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
