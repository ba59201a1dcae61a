package core_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// slowLog is a log whose appends take d: a quorum's round trip and fsync.
type slowLog struct {
	replog.Log
	d time.Duration
}

func (l slowLog) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	time.Sleep(l.d)
	return l.Log.Append(ctx, key, expect, rec)
}

// hopCalls is a transport whose requests take d to reach their node, and their replies d to come
// back.
type hopCalls struct {
	replog.Calls
	d time.Duration
}

func (h hopCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	time.Sleep(h.d)
	reply, err := h.Calls.Send(ctx, node, req)
	time.Sleep(h.d)
	return reply, err
}

// S-CL1: callers of an object at another node, each calling again as soon as its write returns,
// share the owner's commits: a batch whose callers come back over a round trip between nodes waits
// for them (for at most half its last append) instead of committing the first one back alone, so
// that the others would wait for that append and then for their own.
func TestRoutedWritesShareCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			callers = 8
			rounds  = 20
			appends = 10 * time.Millisecond
			hop     = 100 * time.Microsecond // caller i's round trip takes 2 * (i+1) hops
		)
		c := replogtest.NewMemCluster()
		owner := openRouted(t, c, "n1", func(o *core.Options) {
			o.Replication.Log = slowLog{Log: o.Replication.Log, d: appends}
		})
		var hops [callers]*routed
		_, err := owner.add(context.Background(), owner.stub(t, "x"), 0)
		require.NoError(t, err)
		for i := range hops { // the callers come back spread out
			hops[i] = openRouted(t, c, fmt.Sprintf("c%d", i), func(o *core.Options) {
				o.Replication.Calls = hopCalls{Calls: o.Replication.Calls, d: time.Duration(i+1) * hop}
			})
			_, err := hops[i].get(context.Background(), hops[i].stub(t, "x"), struct{}{})
			require.NoError(t, err)
		}

		before, start := owner.rt.Stats(), time.Now()
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				for range rounds {
					if _, err := hops[i].add(context.Background(), hops[i].stub(t, "x"), 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		after, took := owner.rt.Stats(), time.Since(start)
		got, err := owner.get(context.Background(), owner.stub(t, "x"), struct{}{})
		require.NoError(t, err)
		require.Equal(t, callers*rounds, got)
		commits := after.Commits - before.Commits
		t.Logf("%d routed writes, %d commits, in %v", callers*rounds, commits, took)
		// Every round's writes in one commit, but for the first rounds, while the callers fall into
		// step: without waiting, the first caller back commits alone and about two commits serve a
		// round.
		require.LessOrEqual(t, commits, int64(rounds+rounds/4), "commits for %d rounds of %d callers", rounds, callers)
		// The batch commits as soon as the last caller is back: a round takes an append and the
		// slowest caller's round trip, not an append and the longest wait (half an append).
		slowest := 2 * callers * hop
		require.Less(t, took, time.Duration(rounds+rounds/4)*(appends+slowest), "%d rounds: each an append of %v and a round trip of %v at most", rounds, appends, slowest)
	})
}

// S-CL1: the wait for callers is bounded: after a round of 8 routed callers, one of them writing
// alone waits for the others at most half as long as the owner's last append took, then commits.
func TestRoutedWriteAloneWaitsHalfAnAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			callers = 8
			appends = 10 * time.Millisecond
			hop     = 100 * time.Microsecond
		)
		c := replogtest.NewMemCluster()
		owner := openRouted(t, c, "n1", func(o *core.Options) {
			o.Replication.Log = slowLog{Log: o.Replication.Log, d: appends}
		})
		_, err := owner.add(context.Background(), owner.stub(t, "x"), 0)
		require.NoError(t, err)
		from := openRouted(t, c, "n2", func(o *core.Options) {
			o.Replication.Calls = hopCalls{Calls: o.Replication.Calls, d: hop}
		})
		// Rounds until one round's writes share one commit: the batch the lone write comes after
		// then held all of them. (Most often the second round does; the callers of a round need
		// not all reach the owner before its batch begins to commit, and a round that ends in a
		// batch of one gives the lone write nothing to wait for.)
		rounds := 0
		for joined := false; !joined; {
			require.Less(t, rounds, 10, "no round of %d callers shared one commit", callers)
			rounds++
			before := owner.rt.Stats().Commits
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					if _, err := from.add(context.Background(), from.stub(t, "x"), 1); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			joined = owner.rt.Stats().Commits-before == 1
		}

		start := time.Now()
		got, err := from.add(context.Background(), from.stub(t, "x"), 1)
		took := time.Since(start)
		require.NoError(t, err)
		require.Equal(t, rounds*callers+1, got)
		t.Logf("a write alone after a round of %d took %v", callers, took)
		require.LessOrEqual(t, took, appends+appends/2+2*hop, "an append, half an append of waiting, the round trip")
		require.Greater(t, took, appends+2*hop, "the batch waited for the others")
	})
}
