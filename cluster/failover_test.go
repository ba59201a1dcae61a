//go:build !race

// Tests of a 3-node cluster that loses a node: left out of the race detector's runs, as those of
// cluster3_test.go.

package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/replog"
)

// S-X8, S-X1, S-X4: when a shard stream's leader dies, an append and a lease write on another node
// that were under way, or began while there was no leader, complete soon after the stream has a
// new leader (within 2 s of it), not after a fixed 10 s: an attempt that gets no acknowledgement
// gives up after AttemptTimeout (the append says its outcome is unknown, and the writer reads
// the last record, as the runtime does), and one that finds no leader is sent again.
func TestEngine_StreamLeaderKilled(t *testing.T) {
	t.Run("Killed", func(t *testing.T) { testStreamLeaderLost(t, true) })
	// A paused leader's peers go on sending it what they route to it (the stream's subjects, to
	// which it still listens, and a third of the direct gets), and nothing answers: an append
	// under way, or begun before the new leader, waits AttemptTimeout and says its outcome is
	// unknown; the next one goes to both, and a direct get is sent again to another replica.
	t.Run("Paused", func(t *testing.T) { testStreamLeaderLost(t, false) })
}

// testStreamLeaderLost loses a shard stream's leader, killed or paused.
func testStreamLeaderLost(t *testing.T, killed bool) {
	pc := startProxiedCluster(t)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	if !killed {
		// A write begun just before the new leader waits out its attempt: 1 s leaves 1 s for
		// reading back and writing again.
		cfg.AttemptTimeout = time.Second
	}
	e0 := pc.engine(t, 0, cfg)
	leaders, err := e0.Leaders(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const shard = 0
	stream := fmt.Sprintf("%s_log_%d", cfg.Prefix, shard)
	victim := pc.nodeIndex(t, leaders[stream])
	survivor := (victim + 1) % 3
	e := e0
	if survivor != 0 {
		e = pc.engine(t, survivor, cfg)
	}
	key := keyIn(e, shard)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	last, err := e.Append(ctx, key, 0, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := e.Put(ctx, shard, []byte("n1"), 0)
	if err != nil {
		t.Fatal(err)
	}

	// Two writers, as the runtime's: one appends, one renews the shard's lease, each reading
	// back after an unknown outcome. Each stops at its first success of a call that began
	// after the kill.
	type outcome struct {
		what string
		at   time.Time
		err  error
	}
	var killedAt atomic.Int64 // unix nanoseconds; 0 until the kill
	results := make(chan outcome, 3)
	writer := func(what string, write, readBack func(ctx context.Context) error) {
		for {
			began := time.Now().UnixNano()
			err := write(ctx)
			k := killedAt.Load()
			switch {
			case err == nil && k != 0 && began > k:
				results <- outcome{what: what, at: time.Now()}
				return
			case err == nil:
			case killed && k != 0 && began > k:
				// Begun after the kill, with no leader or a new one: nothing was in flight, so
				// the write waits for the new leader and succeeds.
				results <- outcome{what: what, err: fmt.Errorf("a write begun after the kill failed: %w", err)}
				return
			case ctx.Err() == nil && (errors.Is(err, replog.ErrUnknown) || k != 0):
				// Unknown, or failed for the kill: read what is there, and go on from it.
				if err := readBack(ctx); err != nil {
					results <- outcome{what: what, err: err}
					return
				}
			default:
				results <- outcome{what: what, err: err}
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		writer("append", func(ctx context.Context) error {
			seq, err := e.Append(ctx, key, last, []byte("x"))
			if err == nil {
				last = seq
			}
			return err
		}, func(ctx context.Context) (err error) {
			last, _, err = e.Last(ctx, key)
			return err
		})
	})
	wg.Go(func() {
		writer("lease put", func(ctx context.Context) error {
			r, err := e.Put(ctx, shard, []byte("n1"), rev)
			if err == nil {
				rev = r
			}
			return err
		}, func(ctx context.Context) (err error) {
			rev, _, err = e.Get(ctx, shard)
			return err
		})
	})
	time.Sleep(300 * time.Millisecond) // let the writers run: the kill falls on writes under way
	at := time.Now()
	if killed {
		pc.kill(victim)
	} else {
		pc.pause(victim)
	}
	// A write begun within moments of the kill may yet be routed to the dead node before its
	// peers see its routes closed: writes begun later count as begun after it.
	killedAt.Store(at.Add(250 * time.Millisecond).UnixNano())
	// A write that begins while the stream has no leader waits for the new one if no server
	// takes it (no responders: the leader was killed).
	lateBegan := make(chan time.Time, 1)
	wg.Go(func() {
		time.Sleep(500 * time.Millisecond)
		lateBegan <- time.Now()
		late, expect := keysIn(e, shard, 2)[1], uint64(0)
		writer("append begun without a leader", func(ctx context.Context) error {
			_, err := e.Append(ctx, late, expect, []byte("late"))
			return err
		}, func(ctx context.Context) (err error) {
			expect, _, err = e.Last(ctx, late)
			return err
		})
	})
	leaderAt, err := pc.waitLeader(ctx, victim, stream)
	if err != nil {
		t.Fatal(err)
	}
	if began := <-lateBegan; !began.Before(leaderAt) {
		t.Fatalf("the late append began %v after the kill, once the stream had a leader again: it shows nothing", began.Sub(at))
	}
	wg.Wait()
	close(results)
	// The stream takes writes again from the earlier of: a survivor says it leads it (which it
	// may say late: its view waits for locks that the election holds), the first write that
	// succeeded.
	var outs []outcome
	ready := leaderAt
	for r := range results {
		if r.err != nil {
			t.Fatalf("%s after the kill: %v", r.what, r.err)
		}
		outs = append(outs, r)
		if r.at.Before(ready) {
			ready = r.at
		}
	}
	t.Logf("%s lost (it led %s); a survivor says it leads it %v later, writes succeed again %v later", pc.cfgs[victim].Name, stream,
		leaderAt.Sub(at).Round(time.Millisecond), ready.Sub(at).Round(time.Millisecond))
	for _, r := range outs {
		after := r.at.Sub(ready)
		t.Logf("%s: first success %v after the loss, %v after the stream took writes again", r.what, r.at.Sub(at).Round(time.Millisecond), after.Round(time.Millisecond))
		if after > 2*time.Second {
			t.Errorf("%s succeeded %v after the stream took writes again; want within 2 s", r.what, after.Round(time.Millisecond))
		}
	}
}

// S-X8, S-X3: a blob is read while the JetStream meta leader is gone and no other is elected yet: the
// read takes direct gets from the blob's shard stream, nothing that needs the meta leader (a
// consumer, as an object store's read makes, does). So are appends, a trim (a purge, which the
// stream's leader answers), reads and lease writes of a shard whose stream's leader is alive.
func TestEngine_BlobReadWithoutMetaLeader(t *testing.T) {
	pc := startProxiedCluster(t)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	es := []*cluster.Engine{pc.engine(t, 0, cfg), pc.engine(t, 1, cfg), pc.engine(t, 2, cfg)}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	meta, _ := pc.nodes[0].Leaders()
	if meta == "" {
		t.Fatal("no meta leader")
	}
	victim := pc.nodeIndex(t, meta)
	survivor := (victim + 1) % 3
	// A blob in a shard whose stream the meta leader does not lead.
	leaders, err := es[0].Leaders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shard := -1
	for s := range es[0].Shards() {
		if l := leaders[fmt.Sprintf("%s_log_%d", cfg.Prefix, s)]; l != "" && l != meta {
			shard = s
			break
		}
	}
	if shard < 0 {
		// The meta leader leads every shard's stream (it happens: 4 streams, 3 nodes): shard 0's
		// leader steps down, and another node is elected to lead it.
		shard = 0
		stepDownStream(t, ctx, pc.nodes[victim].ClientURL(), fmt.Sprintf("%s_log_0", cfg.Prefix), es[0], meta)
	}
	key := keyIn(es[0], shard)
	blob := bytes.Repeat([]byte("snapshot "), 200_000) // 1.8 MiB: several chunks
	if err := es[victim].PutBlob(ctx, key, "snap-1", bytes.NewReader(blob)); err != nil {
		t.Fatal(err)
	}
	pc.kill(victim)
	start := time.Now()
	var got bytes.Buffer
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	err = es[survivor].GetBlob(rctx, key, "snap-1", &got)
	rcancel()
	took := time.Since(start)
	metaAfter, _ := pc.nodes[survivor].Leaders()
	t.Logf("GetBlob on %s took %v after the meta leader %s was killed; the survivor's meta leader after: %q",
		pc.cfgs[survivor].Name, took.Round(time.Millisecond), meta, metaAfter)
	if err != nil || !bytes.Equal(got.Bytes(), blob) {
		t.Fatalf("GetBlob without a meta leader: %d bytes, %v; want the blob", got.Len(), err)
	}
	// The log and the lease of the blob's shard are served too.
	opStart := time.Now()
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	defer ocancel()
	e := es[survivor]
	seq, err := e.Append(octx, key, 0, []byte("one"))
	if err == nil {
		_, err = e.Append(octx, key, seq, []byte("two"))
	}
	if err == nil {
		err = e.Trim(octx, key, seq+1)
	}
	var recs []string
	if err == nil {
		err = e.Read(octx, key, 0, func(_ uint64, rec []byte) error { recs = append(recs, string(rec)); return nil })
	}
	if err != nil || !slices.Equal(recs, []string{"two"}) {
		t.Fatalf("Append, Trim, Read without a meta leader: %q, %v; want [two]", recs, err)
	}
	rev, err := e.Put(octx, shard, []byte("n2"), 0)
	if err == nil {
		_, err = e.Put(octx, shard, []byte("n2"), rev)
	}
	if err != nil {
		t.Fatalf("lease Put without a meta leader: %v", err)
	}
	metaAfter, _ = pc.nodes[survivor].Leaders()
	t.Logf("Append, Trim, Read, Put took %v; the survivor's meta leader after: %q", time.Since(opStart).Round(time.Millisecond), metaAfter)
	if metaAfter != "" && metaAfter != meta {
		t.Fatalf("a new meta leader (%s) was elected before the read returned: the test shows nothing", metaAfter)
	}
}

// stepDownStream asks stream's leader, from, to step down, and waits until the engine sees another
// node lead it.
func stepDownStream(t *testing.T, ctx context.Context, url, stream string, e *cluster.Engine, from string) {
	t.Helper()
	nc, err := cluster.Connect([]string{url})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for {
		if _, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil); err != nil {
			t.Fatalf("stepping %s's leader down: %v", stream, err)
		}
		for range 50 {
			leaders, err := e.Leaders(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l := leaders[stream]; l != "" && l != from {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// S-X8: Drain hands over every leadership the node holds, the meta group's and its streams', before a
// planned stop: afterwards it leads nothing, and once it is shut down every shard takes appends
// at once on the other nodes (no election to wait for).
func TestNode_DrainHandsLeadershipsOver(t *testing.T) {
	c := startCluster(t, 3)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), Shards: 12}
	es := []*cluster.Engine{c.engine(t, 0, cfg), c.engine(t, 1, cfg), c.engine(t, 2, cfg)}
	meta, _ := c.nodes[0].Leaders()
	if meta == "" {
		t.Fatal("no meta leader")
	}
	d := -1
	for i, cfg := range c.cfgs {
		if cfg.Name == meta {
			d = i
		}
	}
	_, led := c.nodes[d].Leaders()
	if len(led) == 0 {
		t.Fatalf("the meta leader %s leads none of the 12 streams: nothing to show", meta)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.nodes[d].Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	t.Logf("Drain of %s (meta leader, %d streams) took %v", meta, len(led), time.Since(start).Round(time.Millisecond))
	if m, streams := c.nodes[d].Leaders(); m == meta || len(streams) > 0 {
		t.Fatalf("after Drain, %s sees meta leader %q and leads %v; want another meta leader and no stream", meta, m, streams)
	}
	survivor := (d + 1) % 3
	for deadline := time.Now().Add(2 * time.Second); ; {
		m, _ := c.nodes[survivor].Leaders()
		if m != "" && m != meta {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 s after Drain, %s sees meta leader %q; want another", c.cfgs[survivor].Name, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.stop(d)
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	defer acancel()
	for shard := range es[survivor].Shards() {
		if _, err := es[survivor].Append(actx, keyIn(es[survivor], shard), 0, []byte("x")); err != nil {
			t.Fatalf("Append to shard %d right after the drained node stopped: %v", shard, err)
		}
	}
	// A node without a cluster has nothing to hand over.
	alone := startCluster(t, 1)
	if err := alone.nodes[0].Drain(ctx); err != nil {
		t.Fatalf("Drain of a node without a cluster: %v", err)
	}
}

// S-X8, S-X2, S-X4: with a stream's leader stopped (paused, its routes still open: its peers go on
// handing it a share of the direct gets, which it never answers) and another elected, every read
// on a node that keeps no replica of the stream (its server hands each direct get to a replica at
// random) answers within an attempt: a direct get without an answer is sent again.
func TestEngine_ReadsWithAReplicaPaused(t *testing.T) {
	pc := startProxiedClusterOf(t, 4)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1))}
	e0 := pc.engine(t, 0, cfg)
	const shard = 0
	js, err := jetstream.New(pc.conn(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), fmt.Sprintf("%s_log_%d", cfg.Prefix, shard))
	if err != nil {
		t.Fatal(err)
	}
	ci := s.CachedInfo().Cluster
	replicas := map[string]bool{ci.Leader: true}
	victim := pc.nodeIndex(t, ci.Leader)
	for _, r := range ci.Replicas {
		replicas[r.Name] = true
	}
	reader := -1 // the node without a replica
	for i, c := range pc.cfgs {
		if !replicas[c.Name] {
			reader = i
		}
	}
	if victim < 0 || reader < 0 {
		t.Fatalf("stream of shard %d: leader %s, replicas %v: want 3 of the 4 nodes", shard, ci.Leader, replicas)
	}
	e := e0
	if reader != 0 {
		e = pc.engine(t, reader, cfg)
	}
	ctx := t.Context()
	key := keyIn(e, shard)
	seq, err := e.Append(ctx, key, 0, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := e.Put(ctx, shard, []byte("n1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	pc.pause(victim)
	if _, err := pc.waitLeader(ctx, victim, fmt.Sprintf("%s_log_%d", cfg.Prefix, shard)); err != nil {
		t.Fatal(err)
	}
	// The first read may find the new leader still taking over: it gets the time it needs.
	if _, _, err := e.Last(ctx, key); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, cluster.DefaultAttemptTimeout)
		last, _, err := e.Last(rctx, key)
		var got uint64
		if err == nil {
			got, _, err = e.Get(rctx, shard)
		}
		cancel()
		if err != nil || last != seq || got != rev {
			t.Fatalf("read %d with a replica paused: Last %d, Get %d, %v; want %d, %d", i, last, got, err, seq, rev)
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("the slowest of 20 Last and Get pairs with a replica paused: %v", slowest.Round(time.Millisecond))
}

// S-X2, S-X8: a read barrier sent to a stream's leader that has just stopped (paused: its peers go
// on routing the stream's subjects to it) gets no answer; it is sent again every 200 ms within its
// attempt, so the read comes back soon after another node leads the stream, not when the attempt
// ends. The attempt here lasts 30 s, so a barrier that were not sent again would hold the read that
// long.
func TestEngine_ReadBarrierSentAgain(t *testing.T) {
	pc := startProxiedCluster(t)
	const attempt = 30 * time.Second
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), AttemptTimeout: attempt}
	const shard = 0
	stream := fmt.Sprintf("%s_log_%d", cfg.Prefix, shard)
	e0 := pc.engine(t, 0, cfg)
	js, err := jetstream.New(pc.conn(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	victim := pc.nodeIndex(t, s.CachedInfo().Cluster.Leader)
	if victim < 0 {
		t.Fatalf("stream %s has no leader", stream)
	}
	e := e0
	if reader := (victim + 1) % len(pc.cfgs); reader != 0 {
		e = pc.engine(t, reader, cfg)
	}
	ctx := t.Context()
	key := keyIn(e, shard)
	seq, err := e.Append(ctx, key, 0, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	pc.pause(victim)
	type read struct {
		seq uint64
		err error
		at  time.Time
	}
	done := make(chan read, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 2*attempt)
		defer cancel()
		last, _, err := e.Last(rctx, key) // its first barrier goes to the paused leader
		done <- read{last, err, time.Now()}
	}()
	elected, err := pc.waitLeader(ctx, victim, stream)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.seq != seq {
		t.Fatalf("Last with the leader paused: %d, %v; want %d", r.seq, r.err, seq)
	}
	took := r.at.Sub(elected)
	t.Logf("the read came back %v after another node led the stream", took.Round(time.Millisecond))
	if took > attempt/3 {
		t.Errorf("the read came back %v after another node led the stream; want well within the attempt (%v)", took, attempt)
	}
}
