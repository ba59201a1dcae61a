package bench

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// BenchmarkManyKeys measures durable writes spread over many objects
// (objects=1000, 10000, 100000 with DURABLE_BENCH_LARGE=1, and 1000000 with
// DURABLE_BENCH_HUGE=1) by 64 callers, each call inserting one row into an
// object drawn from a distribution of keys (skew_test.go):
//
//   - dist=roundrobin: the next object in turn, the worst case for a cache
//     of open databases (past its size, every call misses), with
//     cache=1024, the curve published before the default was sized by the
//     machine;
//   - dist=uniform: an object drawn uniformly at random (a call hits the
//     cache with probability cache/objects);
//   - dist=zipf1.1: Zipf's law with s = 1.1 over a fixed random
//     permutation of the objects (so that the hot keys are not the files
//     created first): a few hot keys and a long tail, as real key traffic;
//   - dist=zipf0.99: s = 0.99, YCSB's default skew for key-value stores,
//     with a heavier tail than 1.1 (the 1,000 hottest of 100,000 keys take
//     about 56% of the calls, against 83% at 1.1): the harder of the two.
//
// IdleTimeout is an hour, so that only the cache evicts: on a slow or
// loaded machine, an object of the long tail can wait past the default 10 s
// between two calls, and idle eviction would then stand in for the cache.
// cache=default leaves Options.MaxOpenObjects 0 (sized by the machine;
// the cache-size metric says what it was); cache=1024 sets it. Two callers
// rarely meet on one object under uniform draws, so nearly every call is
// its own commit on its own file; under skew they meet on the hot keys and
// share commits (commits/op). activations/op is the share of calls that
// found their object evicted.
//
//   - impl=runtime is the runtime.
//   - impl=bare is bare SQLite over the same files with a cache of the same
//     size (direct-mapped: file i in slot i mod size), each file held in
//     exclusive locking mode as the runtime holds it (two descriptors, so a
//     cache sized by the descriptor limit fits): a call that misses closes
//     the slot's database (SQLite checkpoints it) and opens its own, then
//     inserts in a transaction of its own.
//
// The objects are created once per process (or once per DURABLE_BENCH_DIR),
// before any timing, and reused by every case; each case opens a runtime
// over them (or the bare cache), opens the objects the cache would hold
// untimed (the first ones for roundrobin and uniform, the hottest for
// Zipf), and starts drawing.
func BenchmarkManyKeys(b *testing.B) {
	const callers = 64
	def := defaultMaxOpen(b)
	for _, n := range manyKeysScales() {
		b.Run("objects="+strconv.Itoa(n), func(b *testing.B) {
			d := tableDirFor(b, n)
			d.mu.Lock()
			defer d.mu.Unlock()
			for _, dist := range keyDists(n) {
				caches := []int{0}
				if dist.name == "roundrobin" {
					caches = []int{maxOpen}
				}
				for _, cache := range caches {
					size, label := cache, strconv.Itoa(cache)
					if cache == 0 {
						size, label = def, "default"
					}
					prefix := "dist=" + dist.name + "/cache=" + label
					b.Run(prefix+"/impl=runtime/callers=64", func(b *testing.B) {
						rt := openRuntime(b, core.Options{Dir: d.path, MaxOpenObjects: cache, IdleTimeout: time.Hour})
						defer closeRuntime(b, rt)
						stubs := registerTables(b, rt, n)
						warm := dist.warm(min(n, int(rt.Stats().MaxOpenObjects)))
						if err := each(len(warm), 64, func(i int) error { return core.Do(context.Background(), stubs[warm[i]], nopCall) }); err != nil {
							b.Fatal(err)
						}
						before := rt.Stats()
						draw := dist.drawer(len(warm))
						runCallers(b, callers, "calls/s", func(ctx context.Context) error {
							return core.Do(ctx, stubs[draw()], insertCall)
						})
						after := rt.Stats()
						b.ReportMetric(float64(after.Commits-before.Commits)/float64(b.N), "commits/op")
						b.ReportMetric(float64(after.Constructs-before.Constructs)/float64(b.N), "activations/op")
						b.ReportMetric(float64(after.MaxOpenObjects), "cache-size")
					})
					b.Run(prefix+"/impl=bare/callers=64", func(b *testing.B) {
						files, err := objectFiles(d.path, "tables", n)
						if err != nil {
							b.Fatal(err)
						}
						c := newBareCache(files, size)
						defer c.close(b)
						warm := dist.warm(min(n, size))
						if err := each(len(warm), 64, func(i int) error { return c.insert(warm[i]) }); err != nil {
							b.Fatal(err)
						}
						draw := dist.drawer(len(warm))
						runCallers(b, callers, "calls/s", func(context.Context) error { return c.insert(draw()) })
					})
				}
			}
		})
	}
}

// tableDirFor returns a directory holding n table objects. The runtime
// creates obj-0 and is closed; the other objects are copies of its file,
// each given its own name in the runtime's meta table (by bare SQLite,
// without fsyncs: nothing here needs to survive a crash), under the file
// name the runtime gives its id. They are not in the catalog (the
// benchmarks never list it): creating 100,000 objects one commit each
// through the runtime takes most of an hour, a copy a fraction of a
// millisecond.
func tableDirFor(b *testing.B, n int) *sharedDir {
	return sharedDirFor(b, "tables-"+strconv.Itoa(n), func(dir string) error {
		rt, err := core.Open(core.Options{Dir: dir, MaxOpenObjects: maxOpen})
		if err != nil {
			return err
		}
		ns, err := core.Register(rt, "tables", newTable)
		if err != nil {
			return errors.Join(err, rt.Close())
		}
		ids := make([]string, n)
		for i := range ids {
			s, err := ns.Get(objName(i))
			if err != nil {
				return errors.Join(err, rt.Close())
			}
			ids[i] = s.ID()
		}
		s, _ := ns.Get(objName(0))
		if err := errors.Join(core.Do(context.Background(), s, nopCall), rt.Close()); err != nil {
			return err
		}
		first := filepath.Join(dir, "tables", ids[0]+".sqlite")
		db, err := sql.Open("sqlite", "file:"+first) // checkpoints the log into the file at close
		if err == nil {
			_, err = db.Exec("SELECT count(*) FROM t")
			err = errors.Join(err, db.Close())
		}
		if err != nil {
			return err
		}
		template, err := os.ReadFile(first)
		if err != nil {
			return err
		}
		return each(n-1, 64, func(i int) error {
			path := filepath.Join(dir, "tables", ids[i+1]+".sqlite")
			if err := os.WriteFile(path, template, 0o644); err != nil {
				return err
			}
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=synchronous(OFF)")
			if err != nil {
				return err
			}
			_, err = db.Exec("UPDATE _durable_meta SET v = ? WHERE k = 'name'", objName(i+1))
			return errors.Join(err, db.Close())
		})
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
		db, err := openBareExclusive(c.files[i])
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
