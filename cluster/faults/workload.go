package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// workload is the clients' side: concurrent writes with expected sequences and reads of the last
// record, on a few keys, through random nodes, every one recorded.
type workload struct {
	h       *harness
	clients []Client
	keys    []string

	mu        sync.Mutex
	ops       map[string][]Op
	readFails []Op     // reads that did not return: not in the histories, counted in the report
	hint      sync.Map // key -> *atomic.Uint64: the last sequence a client saw
	count     atomic.Int64
}

func (w *workload) hintOf(key string) *atomic.Uint64 {
	v, _ := w.hint.LoadOrStore(key, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// learn raises key's hint to seq: a read that began before a write was acknowledged may return
// after it, with the record before, and must not send the hint back.
func (w *workload) learn(key string, seq uint64) {
	h := w.hintOf(key)
	for {
		cur := h.Load()
		if seq <= cur || h.CompareAndSwap(cur, seq) {
			return
		}
	}
}

func (w *workload) record(key string, op Op) {
	w.mu.Lock()
	if op.Write || op.Out == OK {
		w.ops[key] = append(w.ops[key], op)
	} else {
		w.readFails = append(w.readFails, op)
	}
	w.mu.Unlock()
}

// client makes operations until ctx is done: 6 in 10 writes, the rest reads, each through a
// random node. 9 in 10 of a client's operations are on its own key (clients share keys only when
// there are fewer keys than clients), the rest on any key, so that writers race on a key now and
// then, not all the time: a conflict is the register refusing a write that lost such a race. A
// client whose node was down (ErrNodeDown) waits 100 ms before its next operation.
func (w *workload) client(ctx context.Context, id int, r *rand.Rand) {
	n := 0
	for ctx.Err() == nil {
		var err error
		key := w.keys[id%len(w.keys)]
		if r.IntN(10) == 0 {
			key = w.keys[r.IntN(len(w.keys))]
		}
		node := r.IntN(len(w.clients))
		c := w.clients[node]
		octx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if r.IntN(10) < 6 {
			n++
			value := fmt.Sprintf("c%d-%d", id, n)
			expect := w.hintOf(key).Load()
			call := time.Since(w.h.start)
			var seq uint64
			seq, err = c.Write(octx, key, expect, value)
			ret := time.Since(w.h.start)
			out := outcome(err)
			if out == OK {
				w.learn(key, seq)
			}
			op := Op{Client: id, Node: node, Write: true, Expect: expect, Value: value, Seq: seq, Out: out, Call: call, Return: ret}
			if err != nil {
				op.Err = err.Error()
			}
			w.record(key, op)
			if out != OK && !errors.Is(err, ErrNodeDown) {
				// Learn where the key is now, as a writer that lost a race does.
				w.read(octx, id, node, key)
			}
		} else {
			err = w.read(octx, id, node, key)
		}
		cancel()
		w.count.Add(1)
		pause := time.Duration(2+r.IntN(8)) * time.Millisecond
		if errors.Is(err, ErrNodeDown) {
			pause = 100 * time.Millisecond
		}
		time.Sleep(pause)
	}
}

// read reads key's last record through node, records the read, and keeps what it read as the
// key's hint.
func (w *workload) read(ctx context.Context, id, node int, key string) error {
	call := time.Since(w.h.start)
	seq, val, err := w.clients[node].Read(ctx, key)
	op := Op{Client: id, Node: node, Seq: seq, Value: val, Out: OK, Call: call, Return: time.Since(w.h.start)}
	if err != nil {
		op.Out, op.Err, op.Seq, op.Value = Unknown, err.Error(), 0, ""
	}
	w.record(key, op)
	if err == nil {
		w.learn(key, seq)
	}
	return err
}
