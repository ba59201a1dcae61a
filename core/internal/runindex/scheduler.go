package runindex

import (
	"container/heap"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Scheduler fires alarms. It keeps one entry per object with a pending alarm, in a timer heap, and
// mirrors them in the alarm index so that they survive a restart. It knows objects only as
// (namespace, id, name): what a fire does is its Config's Fire.
type Scheduler struct {
	ix   *Index
	fire func(ns, id, name string)
	now  func() time.Time
	log  *slog.Logger

	mu     sync.Mutex // protects h, byKey, parked
	h      entryHeap
	byKey  map[alarmKey]*entry
	parked map[string][]*entry // due entries of namespaces not known yet

	wake     chan struct{} // a new earliest entry, or a namespace unparked
	sem      chan struct{} // bounds concurrent fires
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}  // closed when the loop has returned
	wg       sync.WaitGroup // the flusher and the fires in flight
}

// Config is what a Scheduler is given.
type Config struct {
	// Fire delivers one due alarm. Each runs in a goroutine of its own, at most Concurrency at
	// once; Close waits for them.
	Fire        func(ns, id, name string)
	Concurrency int
	Now         func() time.Time // the clock alarms are due by
	Log         *slog.Logger     // the flusher's failures to write the index
}

type alarmKey struct{ ns, id string }

// entry is one object's pending alarm as the scheduler knows it.
type entry struct {
	at      int64 // when to look (unix ns)
	indexAt int64 // what the index holds (0: no row)
	idx     int   // position in the heap, -1 when not in it
	faults  int   // consecutive failed fires
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

// NewScheduler loads the alarms of ix. It fires nothing until Start.
func NewScheduler(ix *Index, c Config) (*Scheduler, error) {
	s := &Scheduler{
		ix:     ix,
		fire:   c.Fire,
		now:    c.Now,
		log:    c.Log,
		byKey:  make(map[alarmKey]*entry),
		parked: make(map[string][]*entry),
		wake:   make(chan struct{}, 1),
		sem:    make(chan struct{}, c.Concurrency),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	err := ix.Load(func(ns, id, name string, at int64) {
		e := &entry{at: at, indexAt: at, ns: ns, id: id, name: name, idx: -1}
		s.byKey[alarmKey{ns, id}] = e
		heap.Push(&s.h, e)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the loop and the flusher; Close stops them.
func (s *Scheduler) Start() {
	s.wg.Add(1)
	go s.flusher()
	go s.loop()
}

// Poke makes the loop look at the clock again (it may have moved).
func (s *Scheduler) Poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Schedule makes the scheduler look at the object at time at.
func (s *Scheduler) Schedule(ns, id, name string, at int64) {
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
		s.Poke()
	}
}

// ScheduleBy makes the scheduler look at the object no later than at: an earlier look already
// scheduled stays.
func (s *Scheduler) ScheduleBy(ns, id, name string, at int64) {
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	later := e != nil && e.idx >= 0 && e.at <= at
	s.mu.Unlock()
	if !later {
		s.Schedule(ns, id, name, at)
	}
}

// DropWhere forgets the alarms of the objects that match: another node runs them now.
func (s *Scheduler) DropWhere(match func(ns, name string) bool) {
	s.mu.Lock()
	var gone []*entry
	for k, e := range s.byKey {
		if !match(e.ns, e.name) {
			continue
		}
		if e.idx >= 0 {
			heap.Remove(&s.h, e.idx)
		}
		delete(s.byKey, k)
		if ps := s.parked[e.ns]; len(ps) > 0 {
			s.parked[e.ns] = slices.DeleteFunc(ps, func(p *entry) bool { return p == e })
		}
		gone = append(gone, e)
	}
	s.mu.Unlock()
	for _, e := range gone {
		if e.indexAt != 0 {
			s.ix.Delete(e.ns, e.id)
		}
	}
}

// EnsureIndexed makes sure, durably, that the index will look at the object no later than at. It is
// called before the object commits.
func (s *Scheduler) EnsureIndexed(ns, id, name string, at int64) error {
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

// Committed applies an object's committed earliest timer, at.
func (s *Scheduler) Committed(ns, id, name string, at int64) {
	s.Schedule(ns, id, name, at)
	s.mu.Lock()
	e := s.byKey[alarmKey{ns, id}]
	lazy := e.indexAt != at
	e.indexAt = at
	s.mu.Unlock()
	if lazy { // index is already early enough; make it exact when convenient
		_ = s.ix.Upsert(ns, id, name, at, false)
	}
}

// Drop forgets the object's alarm: it committed no timer, or it is gone.
func (s *Scheduler) Drop(ns, id string) {
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
}

// Pending returns the number of alarms the scheduler is waiting for.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// ParkUnknown is for a Fire that finds no namespace ns: unless known (called under the scheduler's
// lock) says otherwise, the object's entry waits for Unpark(ns). Because both happen under one lock,
// an Unpark cannot slip in between. It reports whether the namespace was unknown.
func (s *Scheduler) ParkUnknown(ns, id string, known func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if known() {
		return false
	}
	if e := s.byKey[alarmKey{ns, id}]; e != nil && e.idx < 0 {
		s.parked[ns] = append(s.parked[ns], e)
	}
	return true
}

// Unpark re-queues the due entries of a namespace just known.
func (s *Scheduler) Unpark(ns string) {
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
		s.Poke()
	}
}

// Fired records the outcome of a fire of the object's alarm and returns the consecutive failures
// so far; ok is false when the scheduler no longer has the alarm.
func (s *Scheduler) Fired(ns, id string, failed bool) (faults int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[alarmKey{ns, id}]
	if e == nil {
		return 0, false
	}
	if failed {
		e.faults++
	} else {
		e.faults = 0
	}
	return e.faults, true
}

// loop pops due entries and fires them. It is owned by the scheduler: Close stops it and waits for
// it and for the fires it started.
func (s *Scheduler) loop() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := s.now().UnixNano()
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
			go func(ns, id, name string) {
				defer s.wg.Done()
				defer func() { <-s.sem }()
				s.fire(ns, id, name)
			}(e.ns, e.id, e.name)
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
func (s *Scheduler) flusher() {
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
			s.log.Warn("alarm index write failed", "event", "index_fault", "error", err)
		}
	}
}

// Close stops the loop and the flusher and waits for them and for the fires in flight. It may be
// called more than once, after Start. The index stays open: its owner closes it.
func (s *Scheduler) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.wg.Wait()
	return nil
}
