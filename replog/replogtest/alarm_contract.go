package replogtest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/replog"
)

// alarmContract checks the alarm index of replog.Log: entries written by compare-and-set on their
// revision, revisions that grow and are never reused (a removal too), and a listing per shard
// that holds every entry with a time and no other. It runs as part of LogContract.
func alarmContract(t *testing.T, newLog func(t *testing.T) replog.Log) {
	// Times with nanoseconds: an engine must keep them whole.
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

	t.Run("AlarmSetGetRemove", func(t *testing.T) {
		l := newLog(t)
		ctx := contractContext(t)
		for _, key := range contractKeys {
			at, rev, err := l.GetAlarm(ctx, key)
			if err != nil || !at.IsZero() || rev != 0 {
				t.Fatalf("GetAlarm(%q) of a new log = %v, %d, %v; want zero, 0, nil", key, at, rev, err)
			}
		}
		var revs []uint64
		for i, key := range contractKeys {
			rev, err := l.SetAlarm(ctx, key, t0.Add(time.Duration(i)*time.Second), 0)
			if err != nil || rev == 0 {
				t.Fatalf("SetAlarm(%q) of a new entry = %d, %v; want a revision", key, rev, err)
			}
			revs = append(revs, rev)
		}
		for i, key := range contractKeys {
			at, rev, err := l.GetAlarm(ctx, key)
			if want := t0.Add(time.Duration(i) * time.Second); err != nil || !at.Equal(want) || rev != revs[i] {
				t.Fatalf("GetAlarm(%q) = %v, %d, %v; want %v, %d: each key its own entry", key, at, rev, err, want, revs[i])
			}
		}
		key := contractKeys[0]
		moved, err := l.SetAlarm(ctx, key, t0.Add(time.Hour), revs[0])
		if err != nil || moved <= revs[0] {
			t.Fatalf("SetAlarm at the entry's revision = %d, %v; want a revision above %d", moved, err, revs[0])
		}
		removed, err := l.SetAlarm(ctx, key, time.Time{}, moved)
		if err != nil || removed <= moved {
			t.Fatalf("SetAlarm removing = %d, %v; want a revision above %d", removed, err, moved)
		}
		at, rev, err := l.GetAlarm(ctx, key)
		if err != nil || !at.IsZero() || rev != removed {
			t.Fatalf("GetAlarm after a removal = %v, %d, %v; want zero, %d (a removal keeps its revision)", at, rev, err, removed)
		}
		// A removed entry is written again at the removal's revision, never at 0.
		if _, err := l.SetAlarm(ctx, key, t0, 0); !errors.Is(err, replog.ErrAlarmMoved) {
			t.Fatalf("SetAlarm at 0 over a removed entry: %v; want ErrAlarmMoved", err)
		}
		again, err := l.SetAlarm(ctx, key, t0, removed)
		if err != nil || again <= removed {
			t.Fatalf("SetAlarm over a removed entry = %d, %v; want a revision above %d", again, err, removed)
		}
	})

	t.Run("AlarmConflictWritesNothing", func(t *testing.T) {
		l := newLog(t)
		ctx := contractContext(t)
		key := contractKeys[1]
		rev, err := l.SetAlarm(ctx, key, t0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, stale := range []uint64{0, rev + 1000} {
			if _, err := l.SetAlarm(ctx, key, t0.Add(time.Hour), stale); !errors.Is(err, replog.ErrAlarmMoved) {
				t.Fatalf("SetAlarm at revision %d of an entry at %d: %v; want ErrAlarmMoved", stale, rev, err)
			}
			if _, err := l.SetAlarm(ctx, key, time.Time{}, stale); !errors.Is(err, replog.ErrAlarmMoved) {
				t.Fatalf("SetAlarm removing at revision %d of an entry at %d: %v; want ErrAlarmMoved", stale, rev, err)
			}
		}
		at, got, err := l.GetAlarm(ctx, key)
		if err != nil || !at.Equal(t0) || got != rev {
			t.Fatalf("GetAlarm after refused writes = %v, %d, %v; want %v, %d", at, got, err, t0, rev)
		}
	})

	t.Run("AlarmRacingWritersOneWinner", func(t *testing.T) {
		l := newLog(t)
		ctx := contractContext(t)
		key := contractKeys[2]
		rev, err := l.SetAlarm(ctx, key, t0, 0)
		if err != nil {
			t.Fatal(err)
		}
		const writers = 8
		var wg sync.WaitGroup
		wins := make(chan int, writers)
		for i := range writers {
			wg.Go(func() {
				if _, err := l.SetAlarm(ctx, key, t0.Add(time.Duration(i+1)*time.Minute), rev); err == nil {
					wins <- i
				} else if !errors.Is(err, replog.ErrAlarmMoved) {
					t.Errorf("a racing SetAlarm: %v; want nil or ErrAlarmMoved", err)
				}
			})
		}
		wg.Wait()
		close(wins)
		var won []int
		for i := range wins {
			won = append(won, i)
		}
		if len(won) != 1 {
			t.Fatalf("%d of %d writers at one revision won; want exactly 1", len(won), writers)
		}
		at, _, err := l.GetAlarm(ctx, key)
		if want := t0.Add(time.Duration(won[0]+1) * time.Minute); err != nil || !at.Equal(want) {
			t.Fatalf("GetAlarm after the race = %v, %v; want the winner's %v", at, err, want)
		}
	})

	t.Run("AlarmsListedByShard", func(t *testing.T) {
		l := newLog(t)
		ctx := contractContext(t)
		want := map[string]time.Time{}
		for i, key := range contractKeys {
			rev, err := l.SetAlarm(ctx, key, t0.Add(time.Duration(i)*time.Millisecond), 0)
			if err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 { // removed: not listed
				if _, err := l.SetAlarm(ctx, key, time.Time{}, rev); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want[key] = t0.Add(time.Duration(i) * time.Millisecond)
		}
		seen := map[string]bool{}
		for shard := range l.Shards() {
			err := l.Alarms(ctx, shard, func(key string, at time.Time, rev uint64) error {
				w, ok := want[key]
				if !ok {
					return nil // a key of another check of the same engine, or removed
				}
				if l.ShardOf(key) != shard {
					t.Errorf("Alarms(%d) listed %q, of shard %d", shard, key, l.ShardOf(key))
				}
				if seen[key] {
					t.Errorf("Alarms listed %q twice", key)
				}
				seen[key] = true
				if _, grev, err := l.GetAlarm(ctx, key); !at.Equal(w) || err != nil || grev != rev {
					t.Errorf("Alarms listed %q at %v, revision %d; want %v, revision %d (%v)", key, at, rev, w, grev, err)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Alarms(%d): %v", shard, err)
			}
		}
		for i, key := range contractKeys {
			if _, ok := want[key]; ok != seen[key] {
				t.Errorf("key %q (entry %d): listed %v, has a time %v", key, i, seen[key], ok)
			}
		}
	})

	t.Run("AlarmsStopsAtError", func(t *testing.T) {
		l := newLog(t)
		ctx := contractContext(t)
		key := contractKeys[3]
		if _, err := l.SetAlarm(ctx, key, t0, 0); err != nil {
			t.Fatal(err)
		}
		stop := errors.New("stop")
		err := l.Alarms(ctx, l.ShardOf(key), func(string, time.Time, uint64) error { return stop })
		if !errors.Is(err, stop) {
			t.Fatalf("Alarms with fn failing = %v; want fn's error", err)
		}
		if err := l.Alarms(ctx, l.Shards(), func(string, time.Time, uint64) error { return nil }); err == nil {
			t.Fatalf("Alarms of shard %d of %d: nil error; want one", l.Shards(), l.Shards())
		}
	})
}
