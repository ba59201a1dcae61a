package bench

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/core"
)

// BenchmarkManyKeys measures durable writes spread over many objects
// (objects=1000, 10000, and 100000 with DURABLE_BENCH_LARGE=1) by 64
// callers, each call inserting one row into the next object in turn. Two
// callers rarely meet on one object, so nearly every call is its own commit
// on its own file. MaxOpenObjects is 1,024: with 1,000 objects every
// database stays open and the disk's fsync rate across files is the limit;
// with more, every call finds its object evicted, so it also pays an
// activation (open the database, run the constructor) and, later, the
// eviction of another (close its database). The curve over objects= is the
// cost of outgrowing the cache of open databases.
//
//   - impl=runtime is the runtime.
//   - impl=bare is bare SQLite over the same files with a cache of 1,024
//     open databases (direct-mapped: file i in slot i mod 1,024): a call
//     that misses closes the slot's database (SQLite checkpoints it) and
//     opens its own, then inserts in a transaction of its own.
//
// The objects are created once per process, before any timing, and reused
// by every count; each round opens a runtime over them (or the bare
// cache), opens the first 1,024 of them untimed, and starts the round robin
// after those, so that a round with more objects than the cache measures
// misses from its first call.
func BenchmarkManyKeys(b *testing.B) {
	const callers = 64
	for _, n := range scales() {
		b.Run("objects="+strconv.Itoa(n), func(b *testing.B) {
			d := tableDirFor(b, n)
			d.mu.Lock()
			defer d.mu.Unlock()
			b.Run("impl=runtime/callers=64", func(b *testing.B) {
				rt := openRuntime(b, core.Options{Dir: d.path, MaxOpenObjects: maxOpen})
				defer closeRuntime(b, rt)
				stubs := registerTables(b, rt, n)
				warm := min(n, maxOpen)
				activate(b, stubs[:warm])
				before := rt.Stats().Commits
				var next atomic.Int64
				next.Store(int64(warm - 1))
				runCallers(b, callers, "calls/s", func(ctx context.Context) error {
					return core.Do(ctx, stubs[int(next.Add(1))%n], insertCall)
				})
				b.ReportMetric(float64(rt.Stats().Commits-before)/float64(b.N), "commits/op")
			})
			b.Run("impl=bare/callers=64", func(b *testing.B) {
				files, err := objectFiles(d.path, "tables", n)
				if err != nil {
					b.Fatal(err)
				}
				c := newBareCache(files, maxOpen)
				defer c.close(b)
				warm := min(n, maxOpen)
				if err := each(warm, 64, func(i int) error { return c.insert(i) }); err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				next.Store(int64(warm - 1))
				runCallers(b, callers, "calls/s", func(context.Context) error { return c.insert(int(next.Add(1)) % n) })
			})
		})
	}
}

// tableDirFor returns a directory holding n table objects, created by the
// runtime and closed.
func tableDirFor(b *testing.B, n int) *sharedDir {
	return sharedDirFor(b, "tables-"+strconv.Itoa(n), func(dir string) error {
		rt, err := core.Open(core.Options{Dir: dir, MaxOpenObjects: maxOpen})
		if err != nil {
			return err
		}
		ns, err := core.Register(rt, "tables", newTable)
		if err == nil {
			err = each(n, 64, func(i int) error {
				s, err := ns.Get(objName(i))
				if err != nil {
					return err
				}
				return core.Do(context.Background(), s, nopCall)
			})
		}
		return errors.Join(err, rt.Close())
	})
}

// bareCache is bare SQLite's cache of open databases over files: slot i mod
// len(slots) holds file i's database when it is open.
type bareCache struct {
	files []string
	slots []bareSlot
}

type bareSlot struct {
	mu   sync.Mutex
	file int // -1: empty
	db   *bareDB
}

func newBareCache(files []string, size int) *bareCache {
	c := &bareCache{files: files, slots: make([]bareSlot, min(size, len(files)))}
	for i := range c.slots {
		c.slots[i].file = -1
	}
	return c
}

// insert inserts one row into file i in a transaction of its own, opening
// its database (and closing the one it replaces) if it is not open.
func (c *bareCache) insert(i int) error {
	s := &c.slots[i%len(c.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file != i {
		if s.db != nil {
			err := errors.Join(s.db.ins.Close(), s.db.db.Close())
			s.db, s.file = nil, -1
			if err != nil {
				return err
			}
		}
		db, err := openBare(c.files[i])
		if err != nil {
			return err
		}
		s.db, s.file = db, i
	}
	_, err := s.db.ins.Exec(payload)
	return err
}

func (c *bareCache) close(b *testing.B) {
	for i := range c.slots {
		c.slots[i].db.close(b)
	}
}
