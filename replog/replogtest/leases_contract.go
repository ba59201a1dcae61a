package replogtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/durable-go/durable/replog"
)

// LeasesContract checks that the lease maps newLeases returns keep the promises of replog.Leases:
// create, compare-and-set update and delete, with exactly one winner among racing writers and
// revisions that only grow. newLeases must return an empty map and arrange its own cleanup.
func LeasesContract(t *testing.T, newLeases func(t *testing.T) replog.Leases) {
	t.Run("Missing", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		rev, val, err := ls.Get(ctx, "counters/none")
		if err != nil || rev != 0 || val != nil {
			t.Fatalf("Get of a missing key = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
		if _, err := ls.Put(ctx, "counters/none", []byte("n1"), 5); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put with revision 5 of a missing key: %v; want ErrLeaseConflict", err)
		}
		if err := ls.Delete(ctx, "counters/none", 5); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Delete with revision 5 of a missing key: %v; want ErrLeaseConflict", err)
		}
		if rev, val, err := ls.Get(ctx, "counters/none"); err != nil || rev != 0 || val != nil {
			t.Fatalf("Get after refused writes = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
	})

	t.Run("CreateUpdateDelete", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		r1, err := ls.Put(ctx, "counters/x", []byte("n1"), 0)
		if err != nil || r1 == 0 {
			t.Fatalf("Put creating = %d, %v; want a revision", r1, err)
		}
		if _, err := ls.Put(ctx, "counters/x", []byte("n2"), 0); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put creating a key that exists: %v; want ErrLeaseConflict", err)
		}
		mustGet(t, ls, "counters/x", r1, "n1")
		r2, err := ls.Put(ctx, "counters/x", []byte("n1 again"), r1)
		if err != nil || r2 <= r1 {
			t.Fatalf("Put updating at %d = %d, %v; want a later revision", r1, r2, err)
		}
		mustGet(t, ls, "counters/x", r2, "n1 again")
		for _, stale := range []uint64{r1, r2 + 1} {
			if _, err := ls.Put(ctx, "counters/x", []byte("n2"), stale); !errors.Is(err, replog.ErrLeaseConflict) {
				t.Fatalf("Put at revision %d while the key is at %d: %v; want ErrLeaseConflict", stale, r2, err)
			}
			if err := ls.Delete(ctx, "counters/x", stale); !errors.Is(err, replog.ErrLeaseConflict) {
				t.Fatalf("Delete at revision %d while the key is at %d: %v; want ErrLeaseConflict", stale, r2, err)
			}
		}
		mustGet(t, ls, "counters/x", r2, "n1 again")
		if err := ls.Delete(ctx, "counters/x", r2); err != nil {
			t.Fatalf("Delete at the current revision: %v", err)
		}
		if rev, val, err := ls.Get(ctx, "counters/x"); err != nil || rev != 0 || val != nil {
			t.Fatalf("Get after Delete = %d, %q, %v; want 0, nil, nil", rev, val, err)
		}
		if _, err := ls.Put(ctx, "counters/x", []byte("n2"), r2); !errors.Is(err, replog.ErrLeaseConflict) {
			t.Fatalf("Put at the deleted key's old revision: %v; want ErrLeaseConflict", err)
		}
		// Created again, the key's revisions go on growing: an old revision never comes back.
		r3, err := ls.Put(ctx, "counters/x", []byte("n2"), 0)
		if err != nil || r3 <= r2 {
			t.Fatalf("Put creating the deleted key again = %d, %v; want a revision after %d", r3, err, r2)
		}
		mustGet(t, ls, "counters/x", r3, "n2")
	})

	t.Run("KeysIndependent", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		revs := make(map[string]uint64)
		for _, key := range contractKeys {
			rev, err := ls.Put(ctx, key, []byte("v "+key), 0)
			if err != nil {
				t.Fatalf("Put creating %q: %v (keys must not share an entry)", key, err)
			}
			revs[key] = rev
		}
		for _, key := range contractKeys {
			mustGet(t, ls, key, revs[key], "v "+key)
		}
		if err := ls.Delete(ctx, contractKeys[0], revs[contractKeys[0]]); err != nil {
			t.Fatalf("Delete %q: %v", contractKeys[0], err)
		}
		for _, key := range contractKeys[1:] {
			mustGet(t, ls, key, revs[key], "v "+key)
		}
	})

	t.Run("RacingWritersOneWinner", func(t *testing.T) {
		ls, ctx := newLeases(t), contractContext(t)
		const writers, rounds = 8, 5
		var rev uint64
		for round := range rounds {
			val := func(w int) string { return fmt.Sprintf("r%d n%d", round, w) }
			ws, revs, other := race(writers, replog.ErrLeaseConflict, func(w int) (uint64, error) {
				return ls.Put(ctx, "counters/race", []byte(val(w)), rev)
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
			mustGet(t, ls, "counters/race", revs[0], winners[0])
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
				if err := ls.Delete(ctx, "counters/race", rev); err == nil {
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
