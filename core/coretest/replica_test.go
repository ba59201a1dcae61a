package coretest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// refLog is the plainest core.Log there is, kept in memory: the contract suite must pass against
// it, so that a failure against a real engine is the engine's.
type refLog struct {
	mu    sync.Mutex
	seq   uint64
	recs  map[string][]refRec
	blobs map[string][]byte
}

type refRec struct {
	seq uint64
	rec []byte
}

func (l *refLog) Append(_ context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last uint64
	if rs := l.recs[key]; len(rs) > 0 {
		last = rs[len(rs)-1].seq
	}
	if last != expect {
		return 0, fmt.Errorf("key %q is at %d, not %d: %w", key, last, expect, core.ErrLogConflict)
	}
	l.seq++
	l.recs[key] = append(l.recs[key], refRec{l.seq, bytes.Clone(rec)})
	return l.seq, nil
}

func (l *refLog) Last(_ context.Context, key string) (uint64, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.recs[key]
	if len(rs) == 0 {
		return 0, nil, nil
	}
	return rs[len(rs)-1].seq, bytes.Clone(rs[len(rs)-1].rec), nil
}

func (l *refLog) Read(_ context.Context, key string, after uint64, fn func(uint64, []byte) error) error {
	l.mu.Lock()
	rs := append([]refRec(nil), l.recs[key]...)
	l.mu.Unlock()
	for _, r := range rs {
		if r.seq <= after {
			continue
		}
		if err := fn(r.seq, bytes.Clone(r.rec)); err != nil {
			return err
		}
	}
	return nil
}

func (l *refLog) Trim(_ context.Context, key string, before uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.recs[key]
	i := 0
	for i < len(rs) && rs[i].seq < before {
		i++
	}
	l.recs[key] = rs[i:]
	return nil
}

func (l *refLog) PutBlob(_ context.Context, name string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blobs[name] = b
	return nil
}

func (l *refLog) GetBlob(_ context.Context, name string, w io.Writer) error {
	l.mu.Lock()
	b, ok := l.blobs[name]
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("blob %q: %w", name, core.ErrNoObject)
	}
	_, err := w.Write(b)
	return err
}

func (l *refLog) DeleteBlob(_ context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.blobs, name)
	return nil
}

type refLeases struct {
	mu   sync.Mutex
	rev  uint64
	vals map[string]refRec
}

func (ls *refLeases) Get(_ context.Context, key string) (uint64, []byte, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	v, ok := ls.vals[key]
	if !ok {
		return 0, nil, nil
	}
	return v.seq, bytes.Clone(v.rec), nil
}

func (ls *refLeases) Put(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.vals[key].seq != rev {
		return 0, core.ErrLeaseConflict
	}
	ls.rev++
	ls.vals[key] = refRec{ls.rev, bytes.Clone(value)}
	return ls.rev, nil
}

func (ls *refLeases) Delete(_ context.Context, key string, rev uint64) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	v, ok := ls.vals[key]
	if !ok || v.seq != rev {
		return core.ErrLeaseConflict
	}
	delete(ls.vals, key)
	return nil
}

// S-X1, S-X2, S-X3: the log's contract suite passes against the reference in-memory engine.
func TestLogContract_Reference(t *testing.T) {
	coretest.LogContract(t, func(*testing.T) core.Log {
		return &refLog{recs: map[string][]refRec{}, blobs: map[string][]byte{}}
	})
}

// S-X4: the leases' contract suite passes against the reference in-memory engine.
func TestLeasesContract_Reference(t *testing.T) {
	coretest.LeasesContract(t, func(*testing.T) core.Leases {
		return &refLeases{vals: map[string]refRec{}}
	})
}
