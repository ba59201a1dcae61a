//go:build !race

// A test of a 3-node cluster: left out of the race detector's runs, as those of cluster3_test.go.

package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// S-X4: concurrent reads of leases, from every node, each return within one attempt of a read
// (2 s): a read's barrier is not lost to another read's. (The lease bucket keeps one message per
// subject; barriers that shared one subject replaced each other, and every read but the last of a
// burst waited out its attempt and began again.) Nodes that are not an object's owner read its
// lease at every call they refuse, so such bursts are the common case.
func TestEngine_ConcurrentLeaseReads(t *testing.T) {
	c := sharedCluster(t)
	es := c.engines(t)
	for k := range 3 {
		if _, err := es[0].Put(t.Context(), k, []byte("n1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for g := range 12 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
				defer cancel()
				if _, v, err := es[g%3].Get(ctx, g%3); err != nil || string(v) != "n1" {
					errs <- fmt.Errorf("round %d, reader %d: %q, %v", round, g, v, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}
