package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
)

// S-X10: a shard with more alarm entries than one batched direct get answers (1,024
// subjects) is listed whole, by its groups of subjects; removed entries are not listed.
func TestEngine_AlarmsListedPastOneBatch(t *testing.T) {
	c := startCluster(t, 1)
	e := c.engine(t, 0, cluster.Config{Shards: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const n = 1100
	at := time.Unix(1_900_000_000, 123)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			key := fmt.Sprintf("ns/o%d", i)
			rev, err := e.SetAlarm(ctx, key, at.Add(time.Duration(i)), 0)
			if err == nil && i%10 == 0 {
				_, err = e.SetAlarm(ctx, key, time.Time{}, rev)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]time.Time{}
	if err := e.Alarms(ctx, 0, func(key string, at time.Time, _ uint64) error {
		got[key] = at
		return nil
	}); err != nil {
		t.Fatalf("Alarms: %v", err)
	}
	if want := n - n/10; len(got) != want {
		t.Fatalf("Alarms listed %d entries; want %d", len(got), want)
	}
	for i := range n {
		key := fmt.Sprintf("ns/o%d", i)
		a, ok := got[key]
		if i%10 == 0 {
			if ok {
				t.Fatalf("removed %q listed", key)
			}
			continue
		}
		if !ok || !a.Equal(at.Add(time.Duration(i))) {
			t.Fatalf("%q listed %v (%v); want %v", key, a, ok, at.Add(time.Duration(i)))
		}
	}
}
