package replogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/replog"
)

// CallsContract checks that the transports newCalls returns keep the promises of replog.Calls: a
// request reaches the node it names, from any node, and its reply comes back; requests are handled
// concurrently; a request to a node nobody serves is ErrUnreachable; one whose reply does not come
// is ErrNoReply when the sender's context ends; oversized requests and replies are ErrCallTooLarge;
// stop ends the handling and waits for it. newCalls returns n views of one transport (one per node)
// and arranges its own cleanup.
func CallsContract(t *testing.T, newCalls func(t *testing.T, n int) []replog.Calls) {
	// serve makes view c serve node with handle, stopped when the test ends.
	serve := func(t *testing.T, c replog.Calls, node string, handle func(context.Context, []byte) []byte) func() {
		t.Helper()
		stop, err := c.Serve(node, handle)
		if err != nil {
			t.Fatalf("Serve(%q): %v", node, err)
		}
		t.Cleanup(stop)
		return stop
	}
	// sendSoon sends until the request is delivered: a subscription made on one node may take a
	// moment to be known on another.
	sendSoon := func(t *testing.T, c replog.Calls, node string, req []byte) ([]byte, error) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			reply, err := c.Send(contractContext(t), node, req)
			if !errors.Is(err, replog.ErrUnreachable) || time.Now().After(deadline) {
				return reply, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("EveryNodeReachesEveryNode", func(t *testing.T) {
		cs := newCalls(t, 3)
		for i, c := range cs {
			name := fmt.Sprintf("node.%d *", i) // any name: dots, spaces and wildcards are plain text
			serve(t, c, name, func(_ context.Context, req []byte) []byte { return append([]byte(name+":"), req...) })
		}
		for i := range cs {
			for j, c := range cs {
				name := fmt.Sprintf("node.%d *", i)
				req := fmt.Appendf(nil, "from %d", j)
				reply, err := sendSoon(t, c, name, req)
				if err != nil {
					t.Fatalf("Send from %d to %q: %v", j, name, err)
				}
				if want := name + ":" + string(req); string(reply) != want {
					t.Fatalf("Send from %d to %q = %q; want %q", j, name, reply, want)
				}
			}
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		cs := newCalls(t, 2)
		const n = 8
		var arrived sync.WaitGroup
		arrived.Add(n)
		release := make(chan struct{})
		serve(t, cs[0], "n0", func(_ context.Context, req []byte) []byte {
			if string(req) != "ping" {
				arrived.Done()
				<-release // every request is handled at once, or this never ends
			}
			return req
		})
		if _, err := sendSoon(t, cs[1], "n0", []byte("ping")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		var sent sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			sent.Go(func() {
				req := fmt.Appendf(nil, "r%d", i)
				reply, err := cs[1].Send(contractContext(t), "n0", req)
				if err == nil && !bytes.Equal(reply, req) {
					err = fmt.Errorf("reply %q to %q", reply, req)
				}
				errs <- err
			})
		}
		waited := make(chan struct{})
		go func() { arrived.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Errorf("%d requests are not handled concurrently", n)
		}
		close(release)
		sent.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Send: %v", err)
			}
		}
	})

	// Replies that are ready at once (a commit's turns end together) each reach their own sender,
	// however the transport sends them, and so do requests sent at once.
	t.Run("RepliesAtOnce", func(t *testing.T) {
		cs := newCalls(t, 2)
		const n = 64
		var arrived atomic.Int32
		all, release := make(chan struct{}), make(chan struct{})
		serve(t, cs[0], "n0", func(_ context.Context, req []byte) []byte {
			if string(req) != "ping" {
				if arrived.Add(1) == n {
					close(all)
				}
				<-release
			}
			return append([]byte("re:"), req...)
		})
		if _, err := sendSoon(t, cs[1], "n0", []byte("ping")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		ctx, cancel := context.WithTimeout(contractContext(t), 10*time.Second)
		defer cancel()
		start := make(chan struct{})
		var sent sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			sent.Go(func() {
				<-start
				req := fmt.Appendf(nil, "r%d", i)
				reply, err := cs[1].Send(ctx, "n0", req)
				if err == nil && string(reply) != "re:"+string(req) {
					err = fmt.Errorf("reply %q to %q", reply, req)
				}
				errs <- err
			})
		}
		close(start)
		select {
		case <-all:
		case <-ctx.Done():
			t.Errorf("%d of %d requests sent at once arrived", arrived.Load(), n)
		}
		close(release)
		sent.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Send: %v", err)
			}
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		c := newCalls(t, 1)[0]
		_, err := c.Send(contractContext(t), "nobody", []byte("hello"))
		if !errors.Is(err, replog.ErrUnreachable) {
			t.Fatalf("Send to a node nobody serves: %v; want ErrUnreachable", err)
		}
	})

	t.Run("NoReply", func(t *testing.T) {
		cs := newCalls(t, 2)
		handled := make(chan struct{}, 1)
		serve(t, cs[0], "slow", func(ctx context.Context, req []byte) []byte {
			if string(req) == "wait" {
				handled <- struct{}{}
				<-ctx.Done() // until stop
			}
			return req
		})
		if _, err := sendSoon(t, cs[1], "slow", []byte("ping")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		ctx, cancel := context.WithTimeout(contractContext(t), 200*time.Millisecond)
		defer cancel()
		_, err := cs[1].Send(ctx, "slow", []byte("wait"))
		if !errors.Is(err, replog.ErrNoReply) {
			t.Fatalf("Send whose reply does not come: %v; want ErrNoReply", err)
		}
		select {
		case <-handled:
		default:
			t.Fatalf("ErrNoReply for a request that was not handled")
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		cs := newCalls(t, 2)
		max := cs[0].MaxCallBytes()
		serve(t, cs[0], "big", func(_ context.Context, req []byte) []byte {
			if string(req) == "grow" {
				return bytes.Repeat([]byte("x"), max+1)
			}
			return []byte("ok")
		})
		if _, err := sendSoon(t, cs[1], "big", []byte("ping")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if reply, err := cs[1].Send(contractContext(t), "big", bytes.Repeat([]byte("x"), max)); err != nil || string(reply) != "ok" {
			t.Fatalf("Send of MaxCallBytes bytes = %q, %v; want ok", reply, err)
		}
		if _, err := cs[1].Send(contractContext(t), "big", bytes.Repeat([]byte("x"), max+1)); !errors.Is(err, replog.ErrCallTooLarge) {
			t.Fatalf("Send of MaxCallBytes+1 bytes: %v; want ErrCallTooLarge", err)
		}
		if _, err := cs[1].Send(contractContext(t), "big", []byte("grow")); !errors.Is(err, replog.ErrCallTooLarge) {
			t.Fatalf("a reply of MaxCallBytes+1 bytes: %v; want ErrCallTooLarge", err)
		}
	})

	t.Run("StopEndsHandling", func(t *testing.T) {
		cs := newCalls(t, 2)
		started := make(chan struct{})
		var mu sync.Mutex
		ended := false
		stop := serve(t, cs[0], "n0", func(ctx context.Context, req []byte) []byte {
			if string(req) == "block" {
				close(started)
				<-ctx.Done()
				mu.Lock()
				ended = true
				mu.Unlock()
			}
			return req
		})
		if _, err := sendSoon(t, cs[1], "n0", []byte("ping")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		ctx, cancel := context.WithTimeout(contractContext(t), 30*time.Second)
		defer cancel()
		go cs[1].Send(ctx, "n0", []byte("block")) //nolint:errcheck // its outcome is ErrNoReply or a reply
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("the request was not handled")
		}
		stop()
		mu.Lock()
		if !ended {
			t.Errorf("stop returned while a handler ran")
		}
		mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(contractContext(t), time.Second)
			_, err := cs[1].Send(ctx, "n0", []byte("ping"))
			cancel()
			if errors.Is(err, replog.ErrUnreachable) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Send to a stopped node: %v; want ErrUnreachable", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	})
}
