package replogtest

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/replog"
)

// The in-memory engine's alarm index: one entry per key, its revisions drawn from the log's
// sequence, so they never repeat; a removed entry keeps its revision.

// memAlarm is a key's alarm entry: at 0 is none.
type memAlarm struct {
	at  int64
	rev uint64
}

func (l memLog) GetAlarm(_ context.Context, key string) (time.Time, uint64, error) {
	if err := l.cut(); err != nil {
		return time.Time{}, 0, err
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.alarms[key]
	return alarmTime(a.at), a.rev, nil
}

func (l memLog) SetAlarm(ctx context.Context, key string, at time.Time, rev uint64) (uint64, error) {
	if err := l.cut(); err != nil {
		return 0, fmt.Errorf("replogtest: set the alarm of %q: %w (%w)", key, replog.ErrUnknown, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("replogtest: set the alarm of %q: %w (%w)", key, replog.ErrUnknown, err)
	}
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.alarms[key]
	if a.rev != rev {
		return 0, fmt.Errorf("replogtest: the alarm of %q is at %d, not %d: %w", key, a.rev, rev, replog.ErrAlarmMoved)
	}
	c.seq++ // revisions from the log's sequence: they never repeat
	a = memAlarm{rev: c.seq}
	if !at.IsZero() {
		a.at = at.UnixNano()
	}
	c.alarms[key] = a
	return a.rev, nil
}

func (l memLog) Alarms(_ context.Context, shard int, fn func(string, time.Time, uint64) error) error {
	if err := l.cut(); err != nil {
		return err
	}
	c := l.n.c
	if shard < 0 || shard >= l.Shards() {
		return fmt.Errorf("replogtest: shard %d: want 0 to %d", shard, l.Shards()-1)
	}
	type entry struct {
		key string
		memAlarm
	}
	var es []entry
	c.mu.Lock()
	for key, a := range c.alarms {
		if a.at != 0 {
			es = append(es, entry{key, a})
		}
	}
	c.mu.Unlock()
	for _, e := range es {
		if c.ShardOf(e.key) != shard {
			continue
		}
		if err := fn(e.key, alarmTime(e.at), e.rev); err != nil {
			return err
		}
	}
	return nil
}

func alarmTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
