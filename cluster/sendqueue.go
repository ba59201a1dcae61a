package cluster

import (
	"runtime"
	"sync"
)

// sendQueue is a queue of messages to publish that one goroutine at a time drains, so that the
// messages ready at once go to the server in one write. A nats.go connection writes what it has
// buffered as soon as its flusher goroutine runs, which is as soon as the goroutine that published
// blocks: goroutines woken together (a commit's turns, a batch of replies' callers) that each
// published their own message and then waited would cost a write each, and a read on the server,
// and so on along the route. So each adds its message; the first to find nobody sending yields once
// (runtime.Gosched: the goroutines made ready with it run first, and add theirs), then publishes
// what it takes, until the queue is empty. A message waits at most for the goroutines that were
// ready to run before it; alone, it is sent at once.
//
// Its zero value is an empty queue.
type sendQueue[T any] struct {
	mu      sync.Mutex // guards the fields below
	queue   []T
	spare   []T  // the slice take returned last, reused by the next take
	sending bool // a goroutine takes and publishes, until take finds the queue empty
}

// add queues v and reports whether the caller is to send the queue: nobody else is. The caller then
// calls yield, and take until it returns nothing.
func (s *sendQueue[T]) add(v T) (send bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, v)
	send = !s.sending
	s.sending = true
	return send
}

// yield lets the goroutines ready to run add their messages before the sender takes them.
func (s *sendQueue[T]) yield() { runtime.Gosched() }

// take empties the queue and returns what it held, valid until the next take. Empty, it returns
// nil, and the sender is done: the next add's caller sends.
func (s *sendQueue[T]) take() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.sending = false
		return nil
	}
	clear(s.spare)
	out := s.queue
	s.queue, s.spare = s.spare[:0], out
	return out
}
