package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-go/durable/replog"
)

// Calls from any node. A Method is a registered, typed operation of a namespace's objects: unlike a
// closure given to Call, it can cross machines, its argument and result encoded as JSON. Called on
// a node that may serve the object (the single-process runtime, or a node whose table names no
// other live owner of the object's shard), it runs here as Call does, with nothing encoded. Called
// elsewhere in cluster mode with Replication.Calls, it is sent to the owner the node's table names,
// marked with a request id; the receiving node never sends it on: it runs it, or answers at once
// from its own table with the owner ("moved"), and the caller sends it there with the same id. The
// node that runs a request remembers its id and reply for a while (Replication.CallMemory), so that
// a request sent again (its reply was lost) is answered, not run twice.

// routeOpts are the calls' settings in force: Replication's, with the defaults.
type routeOpts struct {
	timeout     time.Duration
	attempts    int
	remember    int
	rememberFor time.Duration
	noRelay     bool
	maxBody     int64
}

func routeOptsOf(r *Replication) routeOpts {
	o := routeOpts{timeout: r.CallTimeout, attempts: r.CallAttempts, remember: r.CallMemory, rememberFor: r.CallMemoryFor,
		noRelay: r.NoHTTPRelay, maxBody: r.MaxRelayBody}
	orDefault(&o.timeout, 10*time.Second)
	orDefault(&o.attempts, 4)
	orDefault(&o.remember, 4096)
	orDefault(&o.rememberFor, time.Minute)
	orDefault(&o.maxBody, 1<<20)
	// Room for the encoding (base64) and the headers.
	o.maxBody = min(o.maxBody, int64(r.Calls.MaxCallBytes())*3/4-16<<10)
	return o
}

// methodFunc runs a method for a call sent by another node: arg and result in JSON.
type methodFunc func(ctx context.Context, name string, arg []byte) ([]byte, error)

// Define registers the method name of ns's objects, whose code is fn, and returns the function that
// calls it: call(ctx, stub, arg) runs fn on the object stub addresses, from any node. Every node of
// a cluster must define the same methods for a namespace, with the same types: the name is what
// crosses the wire, with arg and the result encoded as JSON; a call sent to a node that has not
// defined it fails with ErrNoMethod. fn runs as a turn of the object, as Call's function does.
//
// The call runs here, as Call does and with nothing encoded, if this node may serve the object (the
// single-process runtime always); otherwise, in cluster mode with Replication.Calls, on the node
// that owns it (see the package's "Calls from any node"), and its result is returned once every
// write the turn made is durable there. Called from inside another object's turn (with its
// context), it opens the caller's input gate while it waits, so A -> B -> A completes across nodes
// too; a call that would wait for a gate kept closed (State.BlockConcurrencyWhile) by a turn waiting
// for it, on any node, fails at once with ErrDeadlock.
//
// Its errors are Call's, on whichever node the method ran: errors.Is(err, ErrOverloaded) and the
// others hold across nodes, and an error of fn's own is a *RemoteError carrying its message (its
// type stays on the node that ran it). errs are the namespace's own sentinel errors fn may return
// (out of stock, say): errors.Is(err, e) holds for each that fn's error matches, across nodes too,
// for every sentinel any Define of the namespace named (each told apart by its message, the same
// on every node). A call sent to another node may also fail with ErrUnreachable, ErrNoMethod, or
// ErrTooLarge (its argument or result is over what Replication.Calls carries).
func Define[T, A, R any](ns *Namespace[T], name string, fn func(ctx context.Context, obj T, arg A) (R, error), errs ...error) (call func(ctx context.Context, s *Stub[T], arg A) (R, error), err error) {
	if err := validateNamespace(name); err != nil {
		return nil, fmt.Errorf("core: Define %s.%s: a method's name is a plain identifier: %w", ns.Name(), name, ErrInvalidName)
	}
	if fn == nil {
		return nil, fmt.Errorf("core: Define %s.%s: nil function", ns.Name(), name)
	}
	if err := ns.ns.addErrors(errs); err != nil {
		return nil, fmt.Errorf("core: Define %s.%s: %w", ns.Name(), name, err)
	}
	m := &method[T, A, R]{name: name, fn: fn}
	run := methodFunc(func(ctx context.Context, obj string, arg []byte) ([]byte, error) {
		s, err := stubOf(ns, obj)
		if err != nil {
			return nil, err
		}
		var a A
		if err := json.Unmarshal(arg, &a); err != nil {
			return nil, s.err("call", fmt.Errorf("%w: the argument of %s: %w", ErrInvalidArgument, name, err))
		}
		r, err := m.local(ctx, s, a)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	})
	if _, dup := ns.ns.rt.methods.LoadOrStore(ns.ns.name+"\x00"+name, run); dup {
		return nil, fmt.Errorf("core: Define %s.%s: defined already", ns.Name(), name)
	}
	return m.call, nil
}

// stubOf returns the stub of ns's object name for a call another node sent, made from the object
// if it is resident: its id and its files are the object's, not computed again as Get does.
func stubOf[T any](ns *Namespace[T], name string) (*Stub[T], error) {
	if o := ns.ns.live(name); o != nil && !o.gone.Load() {
		s := &Stub[T]{ns: ns.ns, name: name, id: o.id, place: o.place}
		s.obj.Store(o)
		return s, nil
	}
	return ns.Get(name)
}

// method is a method Define made.
type method[T, A, R any] struct {
	name string
	fn   func(ctx context.Context, obj T, arg A) (R, error)
}

// call runs the method on the object s addresses, here or at its owner.
func (m *method[T, A, R]) call(ctx context.Context, s *Stub[T], arg A) (R, error) {
	rt := s.ns.rt
	if rt.router == nil {
		return m.local(ctx, s, arg)
	}
	var r R
	rc := routedCall{ns: s.ns, name: s.name, method: m.name, chain: chainFor(ctx),
		local: func(ctx context.Context) error {
			c := &callOf[T, R]{fn: func(ctx context.Context, obj T) (R, error) { return m.fn(ctx, obj, arg) }}
			err := s.call(ctx, &c.turn, c)
			r = c.r
			return err
		},
		encode: func() ([]byte, error) { return json.Marshal(arg) },
		decode: func(b []byte) error { return json.Unmarshal(b, &r) },
	}
	err := viaCaller(ctx, func(ctx context.Context) error { return rt.router.call(ctx, &rc) })
	if err != nil {
		var zero R
		return zero, err
	}
	return r, nil
}

// local runs the method on this node.
func (m *method[T, A, R]) local(ctx context.Context, s *Stub[T], arg A) (R, error) {
	return Call(ctx, s, func(ctx context.Context, obj T) (R, error) { return m.fn(ctx, obj, arg) })
}

// waitsForItself refuses a call made with ctx to the object ns/name if the object's gate is kept
// closed by a turn waiting, through calls between nodes, for this one.
func waitsForItself(ctx context.Context, ns, name string) error {
	if c := chainOf(ctx); len(c) > 0 && slices.Contains(c, ns+"/"+name) {
		return fmt.Errorf("%w (%s/%q, across nodes)", ErrDeadlock, ns, name)
	}
	return nil
}

// chainKey marks the context of a call sent by another node with the objects whose gates are kept
// closed by the turns waiting for it, along the call's way.
type chainKey struct{}

func chainOf(ctx context.Context) []string {
	c, _ := ctx.Value(chainKey{}).([]string)
	return c
}

// chainFor is the chain a call made with ctx carries: the chain it came with, and the caller's
// object if its gate stays closed while it waits (inside State.BlockConcurrencyWhile).
func chainFor(ctx context.Context) []string {
	c := chainOf(ctx)
	if t := turnOf(ctx); t != nil && t.o.state.block != nil {
		c = append(slices.Clip(c), t.o.ns.name+"/"+t.o.name)
	}
	return c
}

// router is a node's side of the calls between nodes: it serves the calls sent to this node, and
// sends this node's calls to their objects' owners.
type router struct {
	rt        *Runtime
	node      string
	calls     replog.Calls
	opts      routeOpts
	recent    *recentCalls
	stopServe func()
}

// startRouter serves the calls sent to this node until stop.
func startRouter(rt *Runtime, r *Replication) (*router, error) {
	ro := &router{rt: rt, node: r.Node, calls: r.Calls, opts: routeOptsOf(r)}
	ro.recent = newRecentCalls(ro.opts.remember, ro.opts.rememberFor, rt.now)
	stop, err := r.Calls.Serve(r.Node, ro.handle)
	if err != nil {
		return nil, fmt.Errorf("core: cluster mode: serve calls: %w", err)
	}
	ro.stopServe = stop
	return ro, nil
}

// stop stops serving and waits for the calls being served; nil does nothing.
func (ro *router) stop() {
	if ro != nil {
		ro.stopServe()
	}
}

// routedCall is one call that may be sent to another node.
type routedCall struct {
	ns           *namespace
	name, method string
	chain        []string
	http         *wireHTTP                       // a relayed HTTP request instead of a method
	local        func(ctx context.Context) error // runs the call here
	encode       func() ([]byte, error)          // the argument
	decode       func([]byte) error              // the result
	httpReply    *wireHTTPReply                  // a relayed request's response
	readBody     func() error                    // reads a relayed request's body, as it first leaves
	bodyErr      error                           // why the body could not be relayed
}

func (rc *routedCall) err(err error) error {
	return &Error{Op: "call", Namespace: rc.ns.name, Name: rc.name, Err: err}
}

// mayHaveRun is the error of a call that node received and did not answer, and that cannot be
// asked of it again: its outcome is unknown. cause is the last attempt's error, kept as text only so
// that its retryable class (ErrUnreachable) does not invite running the call a second time.
func (rc *routedCall) mayHaveRun(node string, cause error) error {
	return rc.err(fmt.Errorf("%w: node %q did not answer, and may have run the call: %v", ErrCommitUnknown, node, cause))
}

// call runs rc here or on its owner, following "moved" answers with the same request id.
func (ro *router) call(ctx context.Context, rc *routedCall) error {
	if slices.Contains(rc.chain, rc.ns.name+"/"+rc.name) {
		return rc.err(fmt.Errorf("%w (%s/%q, across nodes)", ErrDeadlock, rc.ns.name, rc.name))
	}
	shard := ro.rt.cluster.ShardOf(rc.ns.name, rc.name)
	target, _ := ro.rt.cluster.Owner(shard)
	var req []byte
	var last error
	// ran is the node that may have run the call: one that was sent it and did not answer. The call
	// goes nowhere else from then on (another node would run it a second time), only to that node
	// again, with the same id, which answers it from its memory if it ran it.
	var ran string
	silent := map[string]bool{} // nodes found silent while a call to them waited: not watched again
	for attempt := range ro.opts.attempts {
		if attempt > 0 && target == "" {
			target, _ = ro.rt.cluster.Owner(shard)
		}
		if ran != "" && target != ran {
			return rc.mayHaveRun(ran, last)
		}
		if target == "" || target == ro.node {
			err := rc.local(ctx)
			var noe *NotOwnerError
			switch {
			case errors.As(err, &noe) && noe.Holder != "" && noe.Holder != ro.node && noe.Holder != "another node":
				target, last = noe.Holder, err
				continue
			case errors.As(err, &noe) && noe.Holder == ro.node:
				// The lease is this node's own from before a restart: the process that held it may
				// be paused, not gone, so it is taken over only once seen unrenewed for LeaseTTL,
				// at noe.Until. The call waits for that, as for a takeover, and is tried again.
				target, last = "", err
				if err := ro.backoffUntil(ctx, attempt, noe.Until); err != nil {
					return last
				}
				continue
			case errors.Is(err, ErrFenced):
				target, last = "", err
				if err := ro.backoff(ctx, attempt); err != nil {
					return last
				}
				continue
			}
			return err
		}
		if req == nil {
			var err error
			if req, err = ro.request(ctx, rc); err != nil {
				return err
			}
		}
		reply, err := ro.send(ctx, target, req, !silent[target])
		if err != nil {
			if errors.Is(err, replog.ErrCallTooLarge) {
				return rc.err(fmt.Errorf("%w: %w", ErrTooLarge, err))
			}
			last = rc.err(fmt.Errorf("%w: node %q: %w", ErrUnreachable, target, err))
			if errors.Is(err, replog.ErrNoReply) {
				ran = target
			}
			if ran != "" && (ctx.Err() != nil || !errors.Is(err, replog.ErrNoReply)) {
				// It cannot be asked again: what it did is unknown.
				return rc.mayHaveRun(ran, err)
			}
			if ctx.Err() != nil {
				return last
			}
			asked := target
			if ran == "" {
				target = ""
			}
			if errors.Is(err, errSilent) { // S-CL14: asked again at once, whether it is there at all
				silent[asked] = true
				continue
			}
			if err := ro.backoff(ctx, attempt); err != nil {
				return last
			}
			continue
		}
		result, hr, we, err := decodeReply(reply)
		if err != nil {
			return rc.err(fmt.Errorf("core: a reply from node %q: %w", target, err))
		}
		if we == nil {
			if rc.http != nil {
				rc.httpReply = hr
				return nil
			}
			if err := rc.decode(result); err != nil {
				return rc.err(fmt.Errorf("core: the result of %s from node %q: %w", rc.method, target, err))
			}
			return nil
		}
		err = we.decode(rc, target)
		ran = "" // it answered: it did not run the call, or its answer is this one
		switch we.Class {
		case classMoved:
			if we.Holder == target {
				// The node's own lease from before its restart: it may serve the object once the
				// lease has lapsed, in we.Wait.
				last = err
				if err := ro.backoffUntil(ctx, attempt, ro.rt.now().Add(time.Duration(we.Wait))); err != nil {
					return last
				}
				continue
			}
			target, last = we.Holder, err
			continue
		case classFenced, classClosed:
			target, last = "", err
			if err := ro.backoff(ctx, attempt); err != nil {
				return last
			}
			continue
		}
		return err
	}
	if ran != "" {
		return rc.mayHaveRun(ran, last)
	}
	return last
}

// backoff waits before a call's attempt after the attempt-th (from 0) is made, in which the table
// learns the new owner: an eighth of the lease time, doubling with each attempt up to half of it,
// so that the default 4 attempts span most of a lease time (a lost owner's shard is taken over
// one lease time after its last renewal). After the last attempt it does not wait.
func (ro *router) backoff(ctx context.Context, attempt int) error {
	return ro.backoffUntil(ctx, attempt, time.Time{})
}

// backoffUntil is backoff that waits at least until the time until, by the runtime's clock, if it
// is not zero: when a lease may be taken over.
func (ro *router) backoffUntil(ctx context.Context, attempt int, until time.Time) error {
	if attempt >= ro.opts.attempts-1 {
		return nil
	}
	d := ro.rt.opts.Replication.leaseTTL() / 8 << min(attempt, 2)
	if !until.IsZero() {
		d = max(d, until.Sub(ro.rt.now()))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// request encodes rc for sending, with a new request id.
func (ro *router) request(ctx context.Context, rc *routedCall) ([]byte, error) {
	var id [16]byte
	rand.Read(id[:])
	w := wireCall{ID: hex.EncodeToString(id[:]), From: ro.node, NS: rc.ns.name, Name: rc.name, Method: rc.method,
		Chain: rc.chain, HTTP: rc.http}
	if dl, ok := ctx.Deadline(); ok {
		w.Timeout = max(int64(time.Until(dl)), 1)
	}
	if rc.readBody != nil {
		if err := rc.readBody(); err != nil {
			rc.bodyErr = err
			return nil, rc.err(err)
		}
		rc.readBody = nil
	}
	if rc.http == nil {
		arg, err := rc.encode()
		if err != nil {
			return nil, rc.err(fmt.Errorf("%w: the argument of %s: %w", ErrInvalidArgument, rc.method, err))
		}
		w.Arg = arg
	}
	b, err := encodeCall(&w)
	if err != nil {
		return nil, rc.err(err)
	}
	if max := ro.calls.MaxCallBytes(); len(b) > max {
		return nil, rc.err(fmt.Errorf("%w: a call of %d bytes: the nodes carry at most %d", ErrTooLarge, len(b), max))
	}
	return b, nil
}

// handle serves a call another node sent: it runs it here, never sending it on. A request sent
// again while it runs, or after, gets its reply.
func (ro *router) handle(ctx context.Context, b []byte) []byte {
	w, err := decodeCall(b)
	if err != nil {
		return replyErr(fmt.Errorf("%w: a call that cannot be read: %w", ErrInvalidArgument, err))
	}
	if w.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(w.Timeout))
		defer cancel()
	}
	d, first := ro.recent.begin(w.ID)
	if !first {
		select {
		case <-d.ready:
			return d.reply
		case <-ctx.Done():
			return replyErr(ctx.Err())
		}
	}
	reply, ran := ro.run(ctx, w)
	if max := ro.calls.MaxCallBytes(); len(reply) > max {
		reply = replyErr(fmt.Errorf("%w: a reply of %d bytes: the nodes carry at most %d", ErrTooLarge, len(reply), max))
	}
	ro.recent.finish(d, reply, ran)
	return reply
}

// run runs a call sent by another node here, and reports whether it ran (or may have): a request
// refused before its turn (another node owns the object, a full queue) is not remembered.
func (ro *router) run(ctx context.Context, w *wireCall) (reply []byte, ran bool) {
	if len(w.Chain) > 0 {
		ctx = context.WithValue(ctx, chainKey{}, w.Chain)
	}
	var err error
	var result []byte
	var hr *wireHTTPReply
	ro.rt.mu.Lock()
	ns := ro.rt.namespaces[w.NS]
	ro.rt.mu.Unlock()
	switch {
	case w.WS != nil: // a WebSocket's traffic (wsrelay.go)
		result, err = ro.rt.ws.relay.serve(ctx, ns, w)
	case ns == nil:
		err = fmt.Errorf("%w: namespace %q is not registered on node %q", ErrNoMethod, w.NS, ro.node)
	case slices.Contains(w.Chain, w.NS+"/"+w.Name):
		err = fmt.Errorf("%w (%s/%q, across nodes)", ErrDeadlock, w.NS, w.Name)
	case w.HTTP != nil:
		hr, err = ro.serveHTTP(ctx, ns, w)
	case w.Method == rearmMethod:
		err = ro.rt.rearmHere(ctx, ns, w.Name, w.Arg)
	default:
		f, ok := ro.rt.methods.Load(w.NS + "\x00" + w.Method)
		if !ok {
			err = fmt.Errorf("%w: %s.%s is not defined on node %q", ErrNoMethod, w.NS, w.Method, ro.node)
			break
		}
		result, err = f.(methodFunc)(ctx, w.Name, w.Arg)
	}
	if err != nil {
		we := encodeErr(err)
		if ns != nil && we.Class == classRemote {
			we.Own = ns.ownClasses(err)
		}
		if noe := (*NotOwnerError)(nil); errors.As(err, &noe) && noe.Holder == ro.node {
			we.Wait = max(int64(noe.Until.Sub(ro.rt.now())), 0)
		}
		return encodeReply(nil, nil, we), we.ran()
	}
	return encodeReply(result, hr, nil), true
}

func replyErr(err error) []byte { return encodeReply(nil, nil, encodeErr(err)) }
