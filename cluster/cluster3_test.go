//go:build !race

// The tests of a 3-node cluster. They are left out of the race detector's runs (and run in
// every other): nats-server 2.15.2 has a data race of its own in its clustered publish path
// (jetstream_batching.go, commit against applyStreamMsgOp), which the detector reports in any
// process that embeds a node of a cluster. The fault harness runs nodes in processes of their own.

package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-X1, S-X2, S-X3, S-X10: the engine keeps replog.Log's contract on three nodes (3 replicas, each engine
// on a node of its own choosing).
func TestEngine_LogContract3Nodes(t *testing.T) {
	c := sharedCluster(t)
	replogtest.LogContract(t, func(t *testing.T) replog.Log { return c.engine(t, rand.IntN(3), cluster.Config{}) })
}

// S-X4: the engine keeps replog.Leases' contract on three nodes.
func TestEngine_LeasesContract3Nodes(t *testing.T) {
	c := sharedCluster(t)
	replogtest.LeasesContract(t, func(t *testing.T) replog.Leases { return c.engine(t, rand.IntN(3), cluster.Config{Shards: 16}) })
}

// S-X8: the engine keeps replog.Beacon's contract on three nodes: an engine on each hears every beat.
func TestEngine_BeaconContract3Nodes(t *testing.T) {
	c := sharedCluster(t)
	replogtest.BeaconContract(t, func(t *testing.T, n int) []replog.Beacon { return c.beacons(t, n) })
}

// S-X1: writers on different nodes race on one key: exactly one wins each expected sequence, and
// every node then reads the same records.
func TestEngine_RacingAppendersAcrossNodes(t *testing.T) {
	c := sharedCluster(t)
	es := c.engines(t)
	ctx := t.Context()
	var last uint64
	for round := range 20 {
		type result struct {
			seq uint64
			err error
		}
		results := make(chan result, 6)
		expect := last // read once: the loop below moves last while late writers start
		for w := range 6 {
			go func() {
				seq, err := es[w%3].Append(ctx, "counters/race", expect, fmt.Appendf(nil, "%d/%d", round, w))
				results <- result{seq, err}
			}()
		}
		wins := 0
		for range 6 {
			r := <-results
			switch {
			case r.err == nil:
				wins++
				last = r.seq
			case !errors.Is(r.err, replog.ErrConflict):
				t.Fatalf("round %d: %v; want success or replog.ErrConflict", round, r.err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners; want 1", round, wins)
		}
	}
	for i, e := range es {
		n := 0
		if err := e.Read(ctx, "counters/race", 0, func(uint64, []byte) error { n++; return nil }); err != nil || n != 20 {
			t.Fatalf("node %d reads %d records, %v; want 20", i, n, err)
		}
	}
}

// S-X1: an append that cannot reach a quorum (two of three nodes down) is replog.ErrUnknown, not a
// conflict; once the nodes are back, Last tells whether it landed, and an append expecting that
// wins.
func TestEngine_UnknownOutcomeWithoutQuorum(t *testing.T) {
	c := startCluster(t, 3)
	e := c.engine(t, 0, cluster.Config{Timeout: 3 * time.Second})
	ctx := t.Context()
	s1, err := e.Append(ctx, "counters/q", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	c.stop(1)
	c.stop(2)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = e.Append(actx, "counters/q", s1, []byte("two"))
	cancel()
	if !errors.Is(err, replog.ErrUnknown) || errors.Is(err, replog.ErrConflict) {
		t.Fatalf("Append without a quorum: %v; want replog.ErrUnknown", err)
	}
	for _, i := range []int{1, 2} {
		if err := c.start(i); err != nil {
			t.Fatal(err)
		}
	}
	// Poll, within a deadline, until the cluster answers again.
	var seq uint64
	var rec []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		seq, rec, err = e.Last(lctx, "counters/q")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Last after the nodes came back: %v", err)
		}
	}
	if !(seq == s1 && string(rec) == "one") && string(rec) != "two" {
		t.Fatalf("Last after the unknown append = %d, %q; want the first record or the unknown one", seq, rec)
	}
	if _, err := e.Append(ctx, "counters/q", seq, []byte("three")); err != nil {
		t.Fatalf("Append expecting the last record Last returned: %v", err)
	}
}

// S-X3: a blob far larger than a message (the maximum payload is 8 MiB) is kept whole on three
// replicas, and read whole on any node right after it is put: the read may be served by a replica
// that is still applying the chunks.
func TestEngine_BlobLargerThanMaxPayload(t *testing.T) {
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // 80 MiB, synced on 3 disks
	defer cancel()
	r := rand.New(rand.NewPCG(1, 2))
	es := make([]*cluster.Engine, 3)
	for round := range 4 {
		// Each round on new streams, whose replicas are most likely to lag.
		prefix := fmt.Sprintf("t%d", prefixes.Add(1))
		for i := range es {
			es[i] = c.engine(t, i, cluster.Config{Prefix: prefix})
		}
		blob := make([]byte, 20<<20+round)
		for i := range blob {
			blob[i] = byte(r.Uint32())
		}
		name := fmt.Sprintf("snapshots/counters/x%d", round)
		if err := es[round%3].PutBlob(ctx, "counters/x", name, bytes.NewReader(blob)); err != nil {
			t.Fatalf("PutBlob of 20 MiB: %v", err)
		}
		want := sha256.Sum256(blob)
		for _, j := range []int{(round + 1) % 3, (round + 2) % 3} {
			h := sha256.New()
			if err := es[j].GetBlob(ctx, "counters/x", name, h); err != nil {
				t.Fatalf("round %d: GetBlob on node %d right after PutBlob on node %d: %v", round, j, round%3, err)
			}
			if !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("round %d: the blob read on node %d differs from the one put", round, j)
			}
		}
	}
	if err := es[2].DeleteBlob(ctx, "counters/x", "snapshots/counters/x0"); err != nil {
		t.Fatal(err)
	}
	if err := es[0].GetBlob(ctx, "counters/x", "snapshots/counters/x0", io.Discard); !errors.Is(err, replog.ErrNoBlob) {
		t.Fatalf("GetBlob after DeleteBlob on another node: %v; want replog.ErrNoBlob", err)
	}
	if err := es[0].DeleteBlob(ctx, "counters/x", "snapshots/counters/x0"); err != nil {
		t.Fatalf("DeleteBlob of a blob already deleted: %v; want nil", err)
	}
}

// S-X4: a lease written on one node is read on another at once, with the revision it was given.
func TestEngine_LeaseReadYourWritesAcrossNodes(t *testing.T) {
	c := sharedCluster(t)
	es := c.engines(t)
	ctx := t.Context()
	var rev uint64
	for i := range 30 {
		r, err := es[i%3].Put(ctx, 1, fmt.Appendf(nil, "n%d", i%3), rev)
		if err != nil {
			t.Fatalf("Put %d at %d: %v", i, rev, err)
		}
		got, val, err := es[(i+1)%3].Get(ctx, 1)
		if err != nil || got != r || string(val) != fmt.Sprintf("n%d", i%3) {
			t.Fatalf("Get on the next node after Put %d = %d, %q, %v; want %d, n%d", i, got, val, err, r, i%3)
		}
		rev = r
	}
}

// S-X1, S-X2: a writer alone on its key is never refused, however many reads of the key run
// meanwhile (a read writes a barrier, which must not look like another writer) and however fast
// it appends (JetStream refuses an append while the previous one is still in flight at the leader,
// storing nothing; the engine sends it again).
func TestEngine_NoFalseConflictUnderReads(t *testing.T) {
	c := sharedCluster(t)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	w := c.engine(t, 0, cluster.Config{Prefix: prefix})
	ctx, stop := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	var reads atomic.Int64
	for i := range 4 {
		r := c.engine(t, i%3, cluster.Config{Prefix: prefix})
		readers.Go(func() {
			for ctx.Err() == nil {
				if _, _, err := r.Last(ctx, "counters/solo"); err == nil {
					reads.Add(1)
				}
			}
		})
	}
	var last uint64
	for i := range 300 {
		seq, err := w.Append(t.Context(), "counters/solo", last, fmt.Appendf(nil, "%d", i))
		if err != nil {
			stop()
			readers.Wait()
			t.Fatalf("append %d of the only writer, expecting its own last record %d: %v", i, last, err)
		}
		last = seq
	}
	stop()
	readers.Wait()
	if reads.Load() == 0 {
		t.Fatal("no read ran while the writer appended")
	}
}

// BenchmarkAppend measures acknowledged appends (fsync on every write, 3 replicas on loopback)
// by 1 and 64 writers, each on a key of its own, and Last, which writes a read barrier.
func BenchmarkAppend(b *testing.B) {
	c, err := newCluster(3, b.TempDir())
	if c != nil {
		defer c.shutdown()
	}
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	nc, err := cluster.Connect([]string{c.url(0)})
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	e, err := cluster.New(ctx, nc, cluster.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64 // every goroutine of every round appends to a key of its own
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			if writers == 1 {
				var last uint64
				for b.Loop() {
					seq, err := e.Append(ctx, fmt.Sprintf("bench/1/%d", next.Load()), last, make([]byte, 512))
					if err != nil {
						b.Fatal(err)
					}
					last = seq
				}
				next.Add(1)
				return
			}
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench/%d/%d", writers, next.Add(1))
				var last uint64
				rec := make([]byte, 512)
				for pb.Next() {
					seq, err := e.Append(ctx, key, last, rec)
					if err != nil {
						b.Error(err)
						return
					}
					last = seq
				}
			})
		})
	}
	b.Run("Last", func(b *testing.B) {
		if _, err := e.Append(ctx, "bench/last", 0, []byte("x")); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := e.Last(ctx, "bench/last"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// S-X7: a node that loses the routes to both other nodes of three says once that it lost its quorum,
// naming them, and Quorum says so too; once one of them is back, it says it has it again. (The
// two nodes are shut down: to the node that watches, a closed route is what a crashed peer's
// kernel leaves too.)
func TestNode_SaysWhenItLosesItsQuorum(t *testing.T) {
	c := startCluster(t, 3)
	lines := make(chan string, 1000)
	c.stop(0)
	c.cfgs[0].Logger = slog.New(lineHandler(lines))
	if err := c.start(0); err != nil {
		t.Fatal(err)
	}
	waitLine := func(want string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, want) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("n1 did not log %q", want)
			}
		}
	}
	waitLine("node n1 has its quorum")
	if err := c.nodes[0].Quorum(); err != nil {
		t.Fatalf("Quorum with all three nodes: %v", err)
	}
	c.stop(1)
	c.stop(2)
	line := waitLine("node n1 lost its quorum")
	err := c.nodes[0].Quorum()
	for _, got := range []string{line, fmt.Sprint(err)} {
		if !strings.Contains(got, "reaches 1 of 3 nodes (n2, n3 unreachable)") {
			t.Errorf("n1 said %q; want the nodes it does not reach", got)
		}
	}
	if !errors.Is(err, cluster.ErrNoQuorum) {
		t.Fatalf("Quorum without a majority: %v; want cluster.ErrNoQuorum", err)
	}
	if err := c.start(1); err != nil {
		t.Fatal(err)
	}
	waitLine("node n1 has its quorum again")
	if err := c.nodes[0].Quorum(); err != nil {
		t.Fatalf("Quorum with two nodes of three: %v", err)
	}
}

// lineHandler sends the message of each record at Info level and above that the node logs of its
// own ("cluster: ...") to a channel, dropping it if the channel is full.
type lineHandler chan string

func (lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "cluster: ") {
		select {
		case h <- r.Message + " " + attrs(r):
		default:
		}
	}
	return nil
}
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineHandler) WithGroup(string) slog.Handler      { return h }

func attrs(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value); return true })
	return b.String()
}
