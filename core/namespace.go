package core

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/telemetry"
)

// A Namespace is a class of objects sharing one constructor, like a Durable Object class. Get
// addresses one object in it by name.
type Namespace[T any] struct {
	ns *namespace
}

// namespace is the untyped part of a Namespace.
type namespace struct {
	rt             *Runtime
	name, dir      string
	ctor           func(context.Context, *State) (any, error)
	alarms, timers bool       // the object type implements Alarmer, TimerHandler
	parent         *namespace // parent and kind are set for a facet kind (facet.go)
	kind           string

	stat *telemetry.Namespace // its counts and its measurements' attributes

	ownMu sync.Mutex              // serializes changes of own
	own   atomic.Pointer[[]error] // the error classes its methods name (errclass.go)

	mu         sync.Mutex               // protects objects, closing and the gone counts
	objects    map[string]*object       // resident objects by name
	closing    map[string]chan struct{} // by id: databases still being closed after eviction
	goneReads  int64                    // rows read and written by objects no longer resident
	goneWrites int64
}

// Register adds a namespace to the runtime. ctor builds an object's in-memory instance; it runs as
// the object's first turn each time the object is activated (first use, and after every eviction),
// so it should only rebuild memory from storage and create tables idempotently.
func Register[T any](rt *Runtime, name string, ctor func(context.Context, *State) (T, error)) (*Namespace[T], error) {
	if err := validateNamespace(name); err != nil {
		return nil, err
	}
	if ctor == nil {
		return nil, errors.New("core: Register: nil constructor")
	}
	dir := datadir.NamespaceDir(rt.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("core: register %s: %w", name, err)
	}
	ns := newNamespace(rt, name, ctor)
	ns.dir = dir
	rt.mu.Lock()
	if rt.isClosed.Load() {
		rt.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := rt.namespaces[name]; dup {
		rt.mu.Unlock()
		return nil, fmt.Errorf("core: namespace %q already registered", name)
	}
	rt.namespaces[name] = ns
	rt.mu.Unlock()
	// After rt.mu is released: a fire takes the scheduler's lock, then rt.mu.
	rt.sched.Unpark(name)
	return &Namespace[T]{ns: ns}, nil
}

// newNamespace builds the untyped namespace of objects of type T.
func newNamespace[T any](rt *Runtime, name string, ctor func(context.Context, *State) (T, error)) *namespace {
	var zero T
	_, alarms := any(zero).(Alarmer)
	_, timers := any(zero).(TimerHandler)
	return &namespace{rt: rt, name: name, alarms: alarms, timers: timers, stat: rt.tel.Namespace(name),
		ctor:    func(ctx context.Context, st *State) (any, error) { return ctor(ctx, st) },
		objects: make(map[string]*object), closing: make(map[string]chan struct{})}
}

// Name returns the namespace's name.
func (n *Namespace[T]) Name() string { return n.ns.name }

// Get returns a stub for the object called name. The same name always addresses the same object,
// across evictions and restarts. Get does no I/O; the object is activated by the first call.
func (n *Namespace[T]) Get(name string) (*Stub[T], error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	id := objectID(n.ns.name, name)
	return &Stub[T]{ns: n.ns, name: name, id: id, place: topPlace(n.ns, name, id)}, nil
}

// NewUniqueID returns a new random object name, for an object nobody can address without being
// given its name: one per session, per upload, per game (the original's newUniqueId). It holds at
// least 128 random bits from crypto/rand (crypto/rand.Text: 26 characters of base32, A-Z and 2-7),
// so it cannot be guessed, and two calls never return the same name in practice. Get(name) addresses the object,
// now and after any restart; keep the name where the object's users will find it.
func (n *Namespace[T]) NewUniqueID() string { return rand.Text() }

// A Stub addresses one object. It is cheap, safe for concurrent use, and may be kept for as long as
// the runtime lives.
type Stub[T any] struct {
	ns       *namespace
	name, id string
	place    placement              // zero for a top-level object
	obj      atomic.Pointer[object] // the resident object last seen, if any
}

// Name returns the object's name (a facet's own name for a facet).
func (s *Stub[T]) Name() string {
	if s.place.name != "" {
		return s.place.name
	}
	return s.name
}

// ID returns the object's id: the hex of a hash of namespace and name.
func (s *Stub[T]) ID() string { return s.id }

// Call runs fn on the object's turn and returns its result once every write the turn made is
// durable. The turn starts when the calls queued before it have run; fn's context marks the turn:
// pass it to State.Await and to calls to other objects. fn's writes commit atomically with the
// turn; if fn returns an error or panics, the turn is rolled back and the error returned wrapped in
// a *RemoteError (inside an *Error). Called from inside another object's turn (with its context),
// Call opens the caller's input gate while it waits, as State.Await does, so A -> B -> A completes.
func Call[T, R any](ctx context.Context, s *Stub[T], fn func(ctx context.Context, obj T) (R, error)) (R, error) {
	c := &callOf[T, R]{fn: fn}
	err := viaCaller(ctx, func(ctx context.Context) error { return s.call(ctx, &c.turn, c) })
	return c.r, err
}

// callOf is a call's turn with its code and its result, made in one allocation.
type callOf[T, R any] struct {
	turn
	fn func(ctx context.Context, obj T) (R, error)
	r  R
}

func (c *callOf[T, R]) run(ctx context.Context, inst any) (err error) {
	c.r, err = c.fn(ctx, inst.(T))
	return err
}

// viaCaller runs fn, a wait for another turn, with the caller's gate open if ctx marks a turn.
func viaCaller(ctx context.Context, fn func(context.Context) error) error {
	if t := turnOf(ctx); t != nil {
		return t.o.await(t, fn)
	}
	return fn(ctx)
}

// Do is Call for functions without a result.
func Do[T any](ctx context.Context, s *Stub[T], fn func(ctx context.Context, obj T) error) error {
	c := &doOf[T]{fn: fn}
	return viaCaller(ctx, func(ctx context.Context) error { return s.call(ctx, &c.turn, c) })
}

// doOf is Do's turn with its code.
type doOf[T any] struct {
	turn
	fn func(ctx context.Context, obj T) error
}

func (c *doOf[T]) run(ctx context.Context, inst any) error { return c.fn(ctx, inst.(T)) }

// call runs t, a call's turn, with its code on the object: t is made for one call and reused only if
// the object turns out evicted before t queued.
func (s *Stub[T]) call(ctx context.Context, t *turn, code turnCode) error {
	rt := s.ns.rt
	if err := rt.enter(); err != nil {
		return s.err("call", err)
	}
	defer rt.leave()
	if rt.router != nil { // cluster mode: a gate kept closed along a call's way, on any node (route.go)
		if err := waitsForItself(ctx, s.ns.name, s.name); err != nil {
			return s.err("call", err)
		}
	}
	for {
		o := s.obj.Load()
		if o == nil || o.gone.Load() {
			o = s.ns.object(s.name, s.id, s.place)
			s.obj.Store(o)
		}
		t.Context, t.o = ctx, o
		if err := o.runTurn(t, code, false, nil); err != errEvicted { // else evicted before queueing: look up again
			if err != nil {
				return s.err("call", o.corrupted(err))
			}
			return nil
		}
	}
}

// err names the object in an error: a facet by its root and path.
func (s *Stub[T]) err(op string, err error) error {
	name := s.name
	if h := s.place.timers; h.owner != "" {
		name = h.name + "/" + h.owner
	}
	return &Error{Op: op, Namespace: s.ns.name, Name: name, Err: err}
}

// with runs fn on the resident object for name, looked up again while fn returns errEvicted.
func (ns *namespace) with(name, id string, place placement, fn func(o *object) error) error {
	for {
		if err := fn(ns.object(name, id, place)); err != errEvicted {
			return err
		}
	}
}

// live returns the resident object for name, or nil.
func (ns *namespace) live(name string) *object {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.objects[name]
}

// object returns the resident object for name, creating it if needed.
func (ns *namespace) object(name, id string, place placement) *object {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if o, ok := ns.objects[name]; ok {
		return o
	}
	o := newObject(ns, name, id, place)
	ns.objects[name] = o
	if ns.rt.counts.Activated(ns.stat) == 1 {
		signal(ns.rt.wake)
	}
	return o
}

// sample is what the metrics read of the namespace at a collection, beside its counts: conns is
// its open WebSocket connections.
func (ns *namespace) sample(conns int) telemetry.Sample {
	ns.mu.Lock()
	objs := make([]*object, 0, len(ns.objects))
	reads, writes := ns.goneReads, ns.goneWrites
	for _, ob := range ns.objects {
		objs = append(objs, ob)
		reads += ob.reads.Load()
		writes += ob.writes.Load()
	}
	ns.mu.Unlock()
	qlen := 0
	for _, ob := range objs {
		ob.mu.Lock()
		qlen += ob.qlen
		ob.mu.Unlock()
	}
	return telemetry.Sample{Queued: int64(qlen), RowsRead: reads, RowsWritten: writes, Conns: int64(conns)}
}

// remove forgets an evicted object and marks its database as closing.
func (ns *namespace) remove(o *object) chan struct{} {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.objects[o.name] == o {
		delete(ns.objects, o.name)
		ns.rt.counts.Deactivated(ns.stat)
		ns.goneReads += o.reads.Load()
		ns.goneWrites += o.writes.Load()
	}
	ch := make(chan struct{})
	ns.closing[o.id] = ch
	return ch
}

// closed marks an evicted object's database as closed.
func (ns *namespace) closed(id string, ch chan struct{}) {
	ns.mu.Lock()
	if ns.closing[id] == ch {
		delete(ns.closing, id)
	}
	ns.mu.Unlock()
	close(ch)
}

// waitClosed waits until no evicted instance of id still has its database open.
func (ns *namespace) waitClosed(id string) {
	for {
		ns.mu.Lock()
		ch, ok := ns.closing[id]
		ns.mu.Unlock()
		if !ok {
			return
		}
		<-ch
	}
}

func (ns *namespace) snapshot() []*object {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return slices.Collect(maps.Values(ns.objects))
}

// TriggerAlarm runs the object's pending alarm now, as if it were due, and reports whether there
// was one; timers already due run too. It is meant for tests and operators (instead of waiting for
// the alarm's time or a testing/synctest bubble: see package coretest). The run is a scheduled one:
// retries and dead letters follow if it fails; a facet's runs through its root. From inside a turn
// (given its context) it opens the caller's gate while it waits, as Call does, so an object may
// trigger its own alarm.
func (s *Stub[T]) TriggerAlarm(ctx context.Context) (bool, error) {
	rt := s.ns.rt
	if err := rt.enter(); err != nil {
		return false, s.err("trigger alarm", err)
	}
	defer rt.leave()
	h := s.place.timers
	var had bool
	err := viaCaller(ctx, func(ctx context.Context) error {
		return h.ns.with(h.name, h.id, placement{}, func(o *object) error {
			err := o.run(ctx, func(ctx context.Context, _ any) error {
				t := ctx.(*turn)
				r, ok, err := t.getTimer(h.owner, "")
				if err != nil || !ok {
					return err
				}
				had = true
				// A facet's run marked with its token stays marked: if it committed before a crash,
				// it is not run again (facet.go).
				r.at, r.running = min(r.at, rt.now().UnixNano()), r.token != 0
				return t.putTimer(r)
			})
			if err == nil && had {
				err = o.runTimers(ctx, true)
			}
			return err
		})
	})
	if err != nil {
		return had, s.err("trigger alarm", err)
	}
	return had, nil
}
