package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster/faults"
)

// LargeEnv names the environment variable that adds the 100,000-object
// cases of the benchmarks over many objects (ManyKeys, AlarmFire): their
// directories take minutes to build.
const LargeEnv = "DURABLE_BENCH_LARGE"

// DirEnv names the environment variable that keeps the directories the
// benchmarks over many objects build: set to a directory, they are built
// there once and reused by later runs (of the same binary: each version of
// the runtime should have its own).
const DirEnv = "DURABLE_BENCH_DIR"

// maxOpen is the bound on open databases the benchmarks over many objects
// set, so that their curve does not move with the runtime's default.
const maxOpen = 1024

// scales are the object counts of the benchmarks over many objects.
func scales() []int {
	s := []int{1_000, 10_000}
	if os.Getenv(LargeEnv) == "1" {
		s = append(s, 100_000)
	}
	return s
}

// shared holds the directories built once per benchmark process and
// reused by every round and count of the benchmarks that read them; TestMain
// removes them.
var shared struct {
	mu   sync.Mutex
	root string
	temp bool // root is removed at the end
	dirs map[string]*sharedDir
}

type sharedDir struct {
	once sync.Once
	path string
	err  error
	mu   sync.Mutex // held by the benchmark using the directory
}

// nextRound counts a round run over the directory, kept in the directory
// itself so that later processes go on counting, and returns the clock
// shift of that round: two hours per round.
func (d *sharedDir) nextRound() (time.Duration, error) {
	path := filepath.Join(d.path, ".rounds")
	n := 0
	if b, err := os.ReadFile(path); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	n++
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		return 0, err
	}
	return time.Duration(2*n) * time.Hour, nil
}

// sharedDirFor returns the directory named key, built by build on first
// use. The caller holds d.mu while it uses it.
func sharedDirFor(b *testing.B, key string, build func(dir string) error) *sharedDir {
	b.Helper()
	shared.mu.Lock()
	if shared.dirs == nil {
		shared.dirs = make(map[string]*sharedDir)
		shared.root = os.Getenv(DirEnv)
	}
	if shared.root == "" {
		root, err := os.MkdirTemp("", "durable-bench-")
		if err != nil {
			shared.mu.Unlock()
			b.Fatal(err)
		}
		shared.root, shared.temp = root, true
	}
	d := shared.dirs[key]
	if d == nil {
		d = &sharedDir{path: filepath.Join(shared.root, key)}
		shared.dirs[key] = d
	}
	shared.mu.Unlock()
	d.once.Do(func() {
		built := filepath.Join(d.path, ".built")
		if _, err := os.Stat(built); err == nil {
			return
		}
		os.RemoveAll(d.path)
		if d.err = build(d.path); d.err == nil {
			d.err = os.WriteFile(built, nil, 0o644)
		}
	})
	if d.err != nil {
		b.Fatalf("building %s: %v", key, d.err)
	}
	return d
}

func TestMain(m *testing.M) {
	faults.RunIfNode(faults.RuntimeTarget{}) // a node process of BenchmarkClusterFailover never returns from here
	code := m.Run()
	if shared.temp {
		os.RemoveAll(shared.root)
	}
	os.Exit(code)
}

// objectFiles returns the database files of namespace ns in dir, sorted.
func objectFiles(dir, ns string, want int) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, ns, "*.sqlite"))
	if err != nil {
		return nil, err
	}
	if len(files) != want {
		return nil, fmt.Errorf("%d object files in %s, want %d", len(files), dir, want)
	}
	sort.Strings(files)
	return files, nil
}
