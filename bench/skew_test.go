package bench

import (
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/durable-go/durable/core"
)

// HugeEnv names the environment variable that adds the 1,000,000-object
// case of BenchmarkManyKeys. Its directory is built through the runtime,
// like the others, at a few hundred objects a second: about an hour, so
// set DirEnv too, to build it once.
const HugeEnv = "DURABLE_BENCH_HUGE"

// manyKeysScales are BenchmarkManyKeys's object counts: scales(), and
// 1,000,000 with HugeEnv.
func manyKeysScales() []int {
	s := scales()
	if os.Getenv(HugeEnv) == "1" {
		s = append(s, 1_000_000)
	}
	return s
}

// keyDist is a distribution of calls over n objects (object indices).
type keyDist struct {
	name string
	n    int
	cdf  []float64 // Zipf: cumulative probability of ranks 0..n-1; nil: not Zipf
	perm []int     // Zipf: the object of each rank
}

// keyDists are the distributions BenchmarkManyKeys draws from over n
// objects.
func keyDists(n int) []keyDist {
	return []keyDist{{name: "roundrobin", n: n}, {name: "uniform", n: n}, zipf("zipf1.1", n, 1.1), zipf("zipf0.99", n, 0.99)}
}

// zipf is Zipf's law with exponent s over n objects: rank k (from 1) is
// drawn with probability proportional to 1/k^s. Ranks map to objects by a
// fixed pseudo-random permutation.
func zipf(name string, n int, s float64) keyDist {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return keyDist{name: name, n: n, cdf: cdf, perm: rand.New(rand.NewPCG(1, 2)).Perm(n)}
}

// warm returns the objects a cache of size would hold before the
// timing: the hottest for Zipf, the first ones otherwise.
func (d keyDist) warm(size int) []int {
	out := make([]int, size)
	for i := range out {
		if d.perm != nil {
			out[i] = d.perm[i]
		} else {
			out[i] = i
		}
	}
	return out
}

// drawer returns a function, safe for concurrent use, that draws an
// object; roundrobin starts after the warmed ones.
func (d keyDist) drawer(warmed int) func() int {
	switch {
	case d.cdf != nil:
		return func() int {
			return d.perm[min(sort.SearchFloat64s(d.cdf, rand.Float64()), d.n-1)]
		}
	case d.name == "uniform":
		return func() int { return rand.IntN(d.n) }
	}
	var next atomic.Int64
	next.Store(int64(warmed - 1))
	return func() int { return int(next.Add(1)) % d.n }
}

// defaultMaxOpen is the runtime's default MaxOpenObjects on this machine.
func defaultMaxOpen(b *testing.B) int {
	rt := openRuntime(b, core.Options{})
	defer closeRuntime(b, rt)
	return int(rt.Stats().MaxOpenObjects)
}
