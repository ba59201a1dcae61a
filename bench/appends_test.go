package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
)

// BenchmarkClusterAppend is a cluster write beside the engine's limit, in the same run, on the same
// 3 embedded JetStream nodes: impl=raw appends a 256-byte record to a 3-replica stream (file
// storage, fsync always) with the subject's last sequence as the expected one, as the engine
// appends a commit's record; impl=cluster is the durable counter increment of a runtime in cluster
// mode (its default settings), whose commit is one such append. From 1 caller to one subject (one
// object), and from 16 callers each to a subject of its own in a stream of its own (16 objects,
// each in a shard of its own: 16 raft groups in both). The runtime and the raw appends use the
// same connection's node, and each raw stream is configured as the shard's stream is and led by
// the same server, that node (an append to a stream led elsewhere crosses one more route). Divide
// impl=cluster's calls/s by impl=raw's. call-us is the mean time of one call (an append, a
// write), and for impl=cluster append-us the mean time of one append of the runtime's (its round
// trip to the quorum and back, as the engine makes it): call-us less append-us is what a write
// adds to its append.
func BenchmarkClusterAppend(b *testing.B) {
	const shards = 16
	js := startJS(b, 3)
	var log *timedLog
	node := js.runtimeOn(b, 0, cluster.Config{Replicas: 3, Shards: shards, Prefix: "append"}, 0, func(o *core.Options) {
		log = &timedLog{Log: o.Replication.Log}
		o.Replication.Log = log
	})
	ns := counterNS(b, node.rt)

	// One object in each shard, resident (its lease taken, its epoch opened) before the clock runs.
	objects := make([]*core.Stub[*core.State], shards)
	for i, left := 0, shards; left > 0; i++ {
		name := fmt.Sprintf("o%d", i)
		if sh := node.eng.ShardOf("counters/" + name); objects[sh] == nil {
			s, err := ns.Get(name)
			if err != nil {
				b.Fatal(err)
			}
			if err := retrying(func() error { return core.Do(context.Background(), s, increment) }); err != nil {
				b.Fatal(err)
			}
			objects[sh] = s
			left--
		}
	}
	raw := newRawAppends(b, node.nc, shards)
	// Each shard's stream and its raw stream led by the same server, the runtime's: where a stream's
	// leader is decides whether an append crosses a route, and elections place them at random.
	for i := range shards {
		for _, stream := range []string{fmt.Sprintf("append_log_%d", i), fmt.Sprintf("RAW_%d", i)} {
			if err := leadOn(node.nc, stream, js.cfgs[0].Name); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Warm up both for 2 s (the streams just made catch up, the leaders settle), outside the clock:
	// the first sub-benchmark would pay for it otherwise.
	warm := make(chan error, shards)
	until := time.Now().Add(2 * time.Second)
	for i := range shards {
		go func() {
			var err error
			for time.Now().Before(until) && (err == nil || core.IsRetryable(err)) {
				if err = raw.append(context.Background(), i); err == nil {
					err = core.Do(context.Background(), objects[i], increment)
				}
			}
			if core.IsRetryable(err) {
				err = nil // a busy machine's timeout: the measured calls retry nothing
			}
			warm <- err
		}()
	}
	for range shards {
		if err := <-warm; err != nil {
			b.Fatal(err)
		}
	}

	for _, callers := range []int{1, 16} {
		// Each caller takes a slot of its own (an object, a subject) for each call.
		slots := make(chan int, callers)
		for i := range callers {
			slots <- i
		}
		b.Run(fmt.Sprintf("subjects=%d/callers=%d/impl=raw", callers, callers), func(b *testing.B) {
			var calls spent
			runCallers(b, callers, "calls/s", func(ctx context.Context) error {
				i := <-slots
				defer func() { slots <- i }()
				defer calls.since(time.Now())
				return raw.append(ctx, i)
			})
			calls.report(b, "call-us")
		})
		b.Run(fmt.Sprintf("subjects=%d/callers=%d/impl=cluster", callers, callers), func(b *testing.B) {
			var calls spent
			log.appends.reset()
			runCallers(b, callers, "calls/s", func(ctx context.Context) error {
				i := <-slots
				defer func() { slots <- i }()
				defer calls.since(time.Now())
				return core.Do(ctx, objects[i], increment)
			})
			calls.report(b, "call-us")
			log.appends.report(b, "append-us")
		})
	}
}

// rawAppends appends records to n streams of one subject each, R3, configured as package cluster
// configures a shard's stream, each append expecting the subject's last sequence.
type rawAppends struct {
	js   jetstream.JetStream
	last []uint64 // each subject's last sequence, touched by the caller holding its slot
	rec  []byte
}

func newRawAppends(b *testing.B, nc *nats.Conn, n int) *rawAppends {
	b.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fmt.Sprintf("RAW_%d", i), Subjects: []string{fmt.Sprintf("raw.%d", i)},
			Storage: jetstream.FileStorage, Replicas: 3, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
			MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1, AllowDirect: true, AllowMsgTTL: true, AllowRollup: true, DenyDelete: true})
		if err != nil {
			b.Fatal(err)
		}
	}
	r := &rawAppends{js: js, last: make([]uint64, n), rec: make([]byte, 256)}
	for i := range n { // each stream's leader elected and answering before the clock runs
		if err := retrying(func() error { return r.append(ctx, i) }); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// append appends a record to subject i.
func (r *rawAppends) append(ctx context.Context, i int) error {
	ack, err := r.js.Publish(ctx, fmt.Sprintf("raw.%d", i), r.rec, jetstream.WithExpectLastSequencePerSubject(r.last[i]))
	if err != nil {
		return fmt.Errorf("%w: %w", core.ErrUnreachable, err) // retryable while a leader is elected
	}
	r.last[i] = ack.Sequence
	return nil
}

// leadOn makes server the leader of stream: it asks the leader to step down in its favour, and waits
// until the stream's information names it.
func leadOn(nc *nats.Conn, stream, server string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, stream)
		var leader string
		if err == nil && s.CachedInfo().Cluster != nil {
			leader = s.CachedInfo().Cluster.Leader
		}
		if leader == server {
			cancel()
			return nil
		}
		if leader != "" {
			_, _ = nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
		}
		cancel()
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s: led by %q, not %q: %v", stream, leader, server, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// spent adds up the time of calls made concurrently.
type spent struct {
	n, total atomic.Int64
}

func (s *spent) since(start time.Time) {
	s.total.Add(int64(time.Since(start)))
	s.n.Add(1)
}

func (s *spent) reset() {
	s.n.Store(0)
	s.total.Store(0)
}

// report reports the mean time of one call, in µs.
func (s *spent) report(b *testing.B, unit string) {
	if n := s.n.Load(); n > 0 {
		b.ReportMetric(float64(s.total.Load())/float64(n)/1e3, unit)
	}
}

// timedLog is a runtime's log that times its appends.
type timedLog struct {
	replog.Log
	appends spent
}

func (l *timedLog) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	defer l.appends.since(time.Now())
	return l.Log.Append(ctx, key, expect, rec)
}
