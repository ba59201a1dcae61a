package core

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"github.com/durable-go/durable/core/internal/alarmindex"
)

// scheduler fires alarms. It keeps one entry per object with a pending alarm, in a timer heap, and
// mirrors them in the runtime's index database so that they survive a restart.
//
// The object's own storage is the truth; the index only says when to look. Before an object commits
// an alarm, the index is made to hold that time or an earlier one, durably: a crash can leave an
// early or spurious entry (which fires, finds nothing due, and is rescheduled or dropped) but never
// lose an alarm.
type scheduler struct {
	rt *Runtime
	ix *alarmindex.Index

	mu     sync.Mutex // protects h, byKey, parked
	h      entryHeap
	byKey  map[alarmKey]*entry
	parked map[string][]*entry // due entries of namespaces not registered yet

	wake     chan struct{} // a new earliest entry, or a namespace registered
	sem      chan struct{} // bounds concurrent fires
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup // fires in flight
}

type alarmKey struct{ ns, id string }

// entry is one object's pending alarm as the scheduler knows it.
type entry struct {
	at      int64 // when to look (unix ns)
	indexAt int64 // what the index holds (0: no row)
	idx     int   // position in the heap, -1 when not in it
	faults  int   // consecutive runtime faults while firing
	ns, id  string
	name    string
}

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *entryHeap) Push(x any)        { e := x.(*entry); e.idx = len(*h); *h = append(*h, e) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

func newScheduler(rt *Runtime) (*scheduler, error) {
	ix, err := openIndex(rt)
	if err != nil {
		return nil, err
	}
	s := &scheduler{
		rt:     rt,
		ix:     ix,
		byKey:  make(map[alarmKey]*entry),
		parked: make(map[string][]*entry),
		wake:   make(chan struct{}, 1),
		sem:    make(chan struct{}, rt.opts.AlarmConcurrency),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	err = ix.Load(func(ns, id, name string, at int64) {
		e := &entry{at: at, indexAt: at, ns: ns, id: id, name: name, idx: -1}
		s.byKey[alarmKey{ns, id}] = e
		heap.Push(&s.h, e)
	})
	if err != nil {
		ix.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.flusher()
	go s.loop()
	return s, nil
}

func (s *scheduler) poke() { signal(s.wake) }

// schedule makes the scheduler look at the object at time at.
func (s *scheduler) schedule(ns, id, name string, at int64) {
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	if e == nil {
		e = &entry{ns: ns, id: id, name: name, idx: -1}
		s.byKey[alarmKey{ns, id}] = e
	}
	e.at = at
	if e.idx >= 0 {
		heap.Fix(&s.h, e.idx)
	} else {
		heap.Push(&s.h, e)
	}
	first := s.h[0] == e
	s.mu.Unlock()
	if first {
		s.poke()
	}
}

// ensureIndexed makes sure, durably, that the index will look at the object no later than at. It is
// called before the object commits.
func (s *scheduler) ensureIndexed(ns, id, name string, at int64) error {
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	if e != nil && e.indexAt != 0 && e.indexAt <= at {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if err := s.ix.Upsert(ns, id, name, at, true); err != nil {
		return err
	}
	s.mu.Lock()
	e = s.byKey[alarmKey{ns, id}]
	if e == nil {
		e = &entry{ns: ns, id: id, name: name, idx: -1, at: at}
		s.byKey[alarmKey{ns, id}] = e
	}
	e.indexAt = at
	s.mu.Unlock()
	return nil
}

// committed applies an object's committed alarm change.
func (s *scheduler) committed(ns, id, name string, c alarmChange) {
	if c.del {
		s.mu.Lock()
		e := s.byKey[alarmKey{ns, id}]
		if e != nil {
			if e.idx >= 0 {
				heap.Remove(&s.h, e.idx)
			}
			delete(s.byKey, alarmKey{ns, id})
		}
		s.mu.Unlock()
		if e != nil && e.indexAt != 0 {
			s.ix.Delete(ns, id)
		}
		return
	}
	s.schedule(ns, id, name, c.at)
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	lazy := e.indexAt != c.at
	e.indexAt = c.at
	s.mu.Unlock()
	if lazy { // index is already early enough; make it exact when convenient
		_ = s.ix.Upsert(ns, id, name, c.at, false)
	}
}

// pending returns the number of alarms the scheduler is waiting for.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// unpark re-queues the due entries of a namespace just registered.
func (s *scheduler) unpark(ns string) {
	s.mu.Lock()
	es := s.parked[ns]
	delete(s.parked, ns)
	for _, e := range es {
		if e.idx < 0 {
			heap.Push(&s.h, e)
		}
	}
	s.mu.Unlock()
	if len(es) > 0 {
		s.poke()
	}
}

// loop pops due entries and fires them. It is owned by the scheduler: close stops it and waits for
// it and for the fires it started.
func (s *scheduler) loop() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := s.rt.now().UnixNano()
		var due []*entry
		for len(s.h) > 0 && s.h[0].at <= now {
			due = append(due, heap.Pop(&s.h).(*entry))
		}
		wait := time.Duration(-1)
		if len(s.h) > 0 {
			wait = time.Duration(s.h[0].at - now)
		}
		s.mu.Unlock()

		for _, e := range due {
			select {
			case s.sem <- struct{}{}:
			case <-s.stop:
				return
			}
			s.wg.Add(1)
			go s.fire(e.ns, e.id, e.name)
		}
		if len(due) > 0 {
			continue
		}
		timer.Stop()
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-tc:
		}
	}
}

// flusher writes the index's lazy changes (deletions, exact times) in the background, so that the
// loop never waits for the disk.
func (s *scheduler) flusher() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.ix.Pending():
		}
		// Let more lazy changes gather, then write them in one commit.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.ix.Flush(); err != nil {
			s.rt.log.Warn("alarm index write failed", "event", "index_fault", "error", err)
		}
	}
}

// fire delivers one due alarm.
func (s *scheduler) fire(ns, id, name string) {
	defer s.wg.Done()
	defer func() { <-s.sem }()
	rt := s.rt
	if rt.enter() != nil {
		return
	}
	defer rt.leave()
	// Look the namespace up and park the entry under one lock, so that a Register in between (which
	// unparks) cannot be missed.
	s.mu.Lock()
	rt.mu.RLock()
	n := rt.namespaces[ns]
	rt.mu.RUnlock()
	if n == nil {
		if e := s.byKey[alarmKey{ns, id}]; e != nil && e.idx < 0 {
			s.parked[ns] = append(s.parked[ns], e)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	ctx, sp := rt.eventSpan(rt.base, "durable.alarm", n, name)
	err := n.with(name, id, placement{}, func(o *object) error { return o.runTimers(ctx, false) })
	eventEnd(sp, err)
	if noe := (*NotOwnerError)(nil); errors.As(err, &noe) && rt.repl != nil && noe.Holder == rt.repl.Name() {
		// Cluster mode: the lease is this node's own from before a restart; it may be taken over (and
		// the alarm run) once it has been seen unrenewed for LeaseTTL.
		s.schedule(ns, id, name, noe.Until.UnixNano())
		return
	}
	if errors.Is(err, ErrNotOwner) {
		// Cluster mode: another node owns the object and runs its alarm; this node forgets it.
		rt.log.Info("an alarm is due on an object another node owns: left to it", "event", "alarm_not_owner",
			"namespace", ns, "name", name, "error", err)
		s.committed(ns, id, name, alarmChange{del: true})
		return
	}
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	if e != nil {
		if err == nil {
			e.faults = 0
		} else {
			e.faults++
		}
	}
	s.mu.Unlock()
	if err != nil && err != ErrClosed && e != nil {
		// The runtime could not run the alarm or record its fate (the constructor failed, a commit
		// failed): the stored alarm is untouched, so look again later.
		d := rt.opts.AlarmRetry.delay(min(e.faults, 10))
		rt.log.Warn("alarm could not run", "event", "alarm_fault", "namespace", ns, "name", name, "retry_in", d, "error", err)
		s.schedule(ns, id, name, rt.now().Add(d).UnixNano())
	}
}

// closeLoop stops the loop and waits for the fires in flight.
func (s *scheduler) closeLoop() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.wg.Wait()
	return nil
}

// closeIndex writes what is pending and closes the index.
func (s *scheduler) closeIndex() error {
	err := s.ix.Flush()
	if cerr := s.ix.Close(); err == nil {
		err = cerr
	}
	return err
}
