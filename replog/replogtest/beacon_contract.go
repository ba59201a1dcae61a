package replogtest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/replog"
)

// BeaconContract checks that the beacons newBeacons returns keep the promises of replog.Beacon: a
// beat reaches every listener of every node, its sender's too, and a stopped listener is called no
// more. newBeacons returns n views of one beacon (one per node) and arranges its own cleanup.
func BeaconContract(t *testing.T, newBeacons func(t *testing.T, n int) []replog.Beacon) {
	t.Run("EveryNodeHearsEveryBeat", func(t *testing.T) {
		bs := newBeacons(t, 3)
		type heard struct {
			mu  sync.Mutex
			got map[string]bool
		}
		hs := make([]*heard, len(bs))
		for i, b := range bs {
			h := &heard{got: map[string]bool{}}
			hs[i] = h
			stop, err := b.Listen(func(msg []byte) {
				h.mu.Lock()
				h.got[string(msg)] = true
				h.mu.Unlock()
			})
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			t.Cleanup(stop)
		}
		want := map[string]bool{}
		deadline := time.Now().Add(10 * time.Second)
		for round := 0; ; round++ {
			// Beats are at most once: send again until each listener has one of each sender's.
			for i, b := range bs {
				msg := fmt.Sprintf("n%d", i)
				want[msg] = true
				if err := b.Beat(contractContext(t), []byte(msg)); err != nil {
					t.Fatalf("Beat: %v", err)
				}
			}
			all := true
			for _, h := range hs {
				h.mu.Lock()
				for msg := range want {
					all = all && h.got[msg]
				}
				h.mu.Unlock()
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d rounds some listener has not heard every node's beat", round+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("StopEndsCalls", func(t *testing.T) {
		b := newBeacons(t, 1)[0]
		var mu sync.Mutex
		calls := 0
		stop, err := b.Listen(func([]byte) { mu.Lock(); calls++; mu.Unlock() })
		if err != nil {
			t.Fatalf("Listen: %v", err)
		}
		stop()
		mu.Lock()
		before := calls
		mu.Unlock()
		for range 5 {
			if err := b.Beat(contractContext(t), []byte("after stop")); err != nil {
				t.Fatalf("Beat: %v", err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if calls != before {
			t.Fatalf("a stopped listener was called %d more times", calls-before)
		}
	})

	t.Run("Oversized", func(t *testing.T) {
		b := newBeacons(t, 1)[0]
		if err := b.Beat(contractContext(t), bytes.Repeat([]byte("x"), replog.MaxBeatBytes+1)); err == nil {
			t.Fatalf("a beat of MaxBeatBytes+1 bytes: nil error")
		}
	})
}
