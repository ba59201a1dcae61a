package core

import (
	"errors"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/runindex"
)

// startScheduler opens the runtime's index (rebuilding it if it must) and starts the scheduler on
// it, with fireAlarm as what a due alarm does.
func (rt *Runtime) startScheduler() error {
	d := datadir.Dir{Path: rt.dir, Log: rt.log, Now: rt.now, IsNamespace: func(name string) bool { return validateNamespace(name) == nil }}
	ix, err := d.OpenIndex()
	if err != nil {
		return err
	}
	s, err := runindex.NewScheduler(ix, runindex.Config{Fire: rt.fireAlarm, Concurrency: rt.opts.AlarmConcurrency, Now: rt.now, Log: rt.log})
	if err != nil {
		ix.Close()
		return err
	}
	rt.ix, rt.sched = ix, s
	s.Start()
	return nil
}

// alarmCommitted tells the scheduler an object's committed alarm change.
func (rt *Runtime) alarmCommitted(ns, id, name string, c alarmChange) {
	if c.del {
		rt.sched.Drop(ns, id)
		return
	}
	rt.sched.Committed(ns, id, name, c.at)
}

// fireAlarm delivers one due alarm: it runs the object's due timers.
func (rt *Runtime) fireAlarm(ns, id, name string) {
	s := rt.sched
	if rt.enter() != nil {
		return
	}
	defer rt.leave()
	var n *namespace
	if s.ParkUnknown(ns, id, func() bool {
		rt.mu.RLock()
		n = rt.namespaces[ns]
		rt.mu.RUnlock()
		return n != nil
	}) {
		return // it fires again once Register unparks it
	}
	ctx, sp := rt.eventSpan(rt.base, "durable.alarm", n, name)
	err := n.with(name, id, placement{}, func(o *object) error { return o.corrupted(o.runTimers(ctx, false)) })
	eventEnd(sp, err)
	if noe := (*NotOwnerError)(nil); errors.As(err, &noe) && rt.cluster != nil && noe.Holder == rt.cluster.Name() {
		// Cluster mode: the lease is this node's own from before a restart; it may be taken over (and
		// the alarm run) once it has been seen unrenewed for LeaseTTL.
		rt.log.Debug("an alarm is due on an object whose lease this node held before a restart: it is looked at again once the lease may be taken",
			"event", "alarm_own_lease", "namespace", ns, "name", name, "until", noe.Until)
		s.Schedule(ns, id, name, noe.Until.UnixNano())
		return
	}
	if errors.Is(err, ErrNotOwner) {
		// Cluster mode: another node owns the object and runs its alarm; this node forgets it.
		rt.log.Info("an alarm is due on an object another node owns: left to it", "event", "alarm_not_owner",
			"namespace", ns, "name", name, "error", err)
		s.Drop(ns, id)
		return
	}
	faults, ok := s.Fired(ns, id, err != nil)
	if err != nil && err != ErrClosed && ok {
		// The runtime could not run the alarm or record its fate (the constructor failed, a commit
		// failed): the stored alarm is untouched, so look again later.
		d := rt.opts.AlarmRetry.delay(min(faults, 10))
		rt.log.Warn("alarm could not run", "event", "alarm_fault", "namespace", ns, "name", name, "retry_in", d, "error", err)
		s.Schedule(ns, id, name, rt.now().Add(d).UnixNano())
	}
}
