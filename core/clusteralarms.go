package core

import "github.com/durable-go/durable/core/internal/replica"

// In cluster mode each shard's alarm index (replog.Log's alarm entries) is loaded into this node's
// scheduler when the node takes the shard, whether by a call, by taking over a dead node's shards
// or at start, and leaves it when the shard goes (SEMANTICS CL9). What is overdue fires at once, at
// most Options.AlarmConcurrency at a time: a node that takes many shards at once activates their
// objects that many at a time, not all together.

// serveClusterAlarms connects cluster mode's shard alarm indexes to the scheduler.
func (rt *Runtime) serveClusterAlarms() {
	if rt.cluster == nil {
		return
	}
	rt.cluster.ServeAlarms(replica.AlarmHooks{Loaded: rt.shardAlarmsLoaded, Gone: rt.shardAlarmsGone})
}

// shardAlarmsLoaded schedules the entries of a shard this node holds.
func (rt *Runtime) shardAlarmsLoaded(shard int, entries []replica.Alarm) {
	for _, a := range entries {
		ns, name, ok := replica.SplitKey(a.Key)
		if !ok {
			rt.log.Warn("an alarm entry of a shard names no object; left alone", "event", "alarm_index_bad_key", "shard", shard, "key", a.Key)
			continue
		}
		rt.sched.ScheduleBy(ns, objectID(ns, name), name, a.At)
	}
}

// shardAlarmsGone drops the alarms of a shard this node no longer holds: its next holder runs them.
func (rt *Runtime) shardAlarmsGone(shard int) {
	rt.sched.DropWhere(func(ns, name string) bool { return rt.cluster.ShardOf(ns, name) == shard })
}
