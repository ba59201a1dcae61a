package replogtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/durable-go/durable/replog"
)

// LeasesContract checks that the leases newLeases returns keep the promises of replog.Leases:
// create, compare-and-set update and delete per shard, with exactly one winner among racing
// writers and revisions that only grow. newLeases must return leases with none set, over at least
// 14 shards, and arrange its own cleanup.
func LeasesContract(t *testing.T, newLeases func(t *testing.T) replog.Leases) {
	t.Run("Missing", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		rev, val, err := ls.Get(ctx, 1)
		if err != nil || rev != 0 || val != nil {
			t.Fatalf("Get of a missing lease = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
		if _, err := ls.Put(ctx, 1, []byte("n1"), 5); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put with revision 5 of a missing lease: %v; want ErrLeaseConflict", err)
		}
		if err := ls.Delete(ctx, 1, 5); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Delete with revision 5 of a missing lease: %v; want ErrLeaseConflict", err)
		}
		if rev, val, err := ls.Get(ctx, 1); err != nil || rev != 0 || val != nil {
			t.Fatalf("Get after refused writes = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
	})

	t.Run("CreateUpdateDelete", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		r1, err := ls.Put(ctx, 2, []byte("n1"), 0)
		if err != nil || r1 == 0 {
			t.Fatalf("Put creating = %d, %v; want a revision", r1, err)
		}
		if _, err := ls.Put(ctx, 2, []byte("n2"), 0); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put creating a lease that exists: %v; want ErrLeaseConflict", err)
		}
		mustGet(t, ls, 2, r1, "n1")
		r2, err := ls.Put(ctx, 2, []byte("n1 again"), r1)
		if err != nil || r2 <= r1 {
			t.Fatalf("Put updating at %d = %d, %v; want a later revision", r1, r2, err)
		}
		mustGet(t, ls, 2, r2, "n1 again")
		for _, stale := range []uint64{r1, r2 + 1} {
			if _, err := ls.Put(ctx, 2, []byte("n2"), stale); !errors.Is(err, replog.ErrLeaseConflict) {
				t.Fatalf("Put at revision %d while the lease is at %d: %v; want ErrLeaseConflict", stale, r2, err)
			}
			if err := ls.Delete(ctx, 2, stale); !errors.Is(err, replog.ErrLeaseConflict) {
				t.Fatalf("Delete at revision %d while the lease is at %d: %v; want ErrLeaseConflict", stale, r2, err)
			}
		}
		mustGet(t, ls, 2, r2, "n1 again")
		if err := ls.Delete(ctx, 2, r2); err != nil {
			t.Fatalf("Delete at the current revision: %v", err)
		}
		if rev, val, err := ls.Get(ctx, 2); err != nil || rev != 0 || val != nil {
			t.Fatalf("Get after Delete = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
		if _, err := ls.Put(ctx, 2, []byte("n2"), r2); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put at the deleted lease's old revision: %v; want ErrLeaseConflict", err)
		}
		// Created again, the shard's revisions go on growing: an old revision never comes back.
		r3, err := ls.Put(ctx, 2, []byte("n2"), 0)
		if err != nil || r3 <= r2 {
			t.Fatalf("Put creating the deleted lease again = %d, %v; want a revision after %d", r3, err, r2)
		}
		mustGet(t, ls, 2, r3, "n2")
	})

	t.Run("ShardsIndependent", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		shards := []int{0, 1, 2, 3, 5, 8, 13}
		revs := make(map[int]uint64)
		for _, shard := range shards {
			rev, err := ls.Put(ctx, shard, []byte(fmt.Sprint("v ", shard)), 0)
			if err != nil {
				t.Fatalf("Put creating shard %d's lease: %v (shards must not share an entry)", shard, err)
			}
			revs[shard] = rev
		}
		for _, shard := range shards {
			mustGet(t, ls, shard, revs[shard], fmt.Sprint("v ", shard))
		}
		if err := ls.Delete(ctx, shards[0], revs[shards[0]]); err != nil {
			t.Fatalf("Delete shard %d's lease: %v", shards[0], err)
		}
		for _, shard := range shards[1:] {
			mustGet(t, ls, shard, revs[shard], fmt.Sprint("v ", shard))
		}
	})

	t.Run("RacingWritersOneWinner", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		const writers, rounds = 8, 5
		var rev uint64
		for round := range rounds {
			val := func(w int) string { return fmt.Sprintf("r%d n%d", round, w) }
			ws, revs, other := race(writers, replog.ErrLeaseConflict, func(w int) (uint64, error) {
				return ls.Put(ctx, 3, []byte(val(w)), rev)
			})
			if len(other) > 0 {
				t.Fatalf("round %d: racing Puts failed other than by conflict: %v", round, other)
			}
			var winners []string
			for _, w := range ws {
				winners = append(winners, val(w))
			}
			if len(winners) != 1 {
				t.Fatalf("round %d: %d racing Puts at revision %d succeeded (%q); want exactly 1", round, len(winners), rev, winners)
			}
			mustGet(t, ls, 3, revs[0], winners[0])
			if revs[0] <= rev {
				t.Fatalf("round %d: revision %d after %d; revisions must grow", round, revs[0], rev)
			}
			rev = revs[0]
		}
		// Racing deletes at the current revision, with racing creates: one delete wins, and a
		// create wins only after it.
		var wg sync.WaitGroup
		var mu sync.Mutex
		deletes := 0
		for range writers {
			wg.Go(func() {
				if err := ls.Delete(ctx, 3, rev); err == nil {
					mu.Lock()
					deletes++
					mu.Unlock()
				} else if !errors.Is(err, replog.ErrLeaseConflict) {
					t.Errorf("racing Delete: %v", err)
				}
			})
		}
		wg.Wait()
		if deletes != 1 {
			t.Fatalf("%d racing Deletes at revision %d succeeded; want exactly 1", deletes, rev)
		}
	})
}
