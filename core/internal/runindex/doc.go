// Package runindex is the runtime's own database and the scheduler that reads it. The database
// holds three things, each about objects known only as (namespace, id, name): the alarm index
// (when each object's earliest timer is due, so that due alarms are found without opening every
// object), the catalog of objects with storage (their files, creation, last activity and size), and
// the dead letters (timers given up after their last retry). All of it is derived: it can be
// rebuilt from the objects' own databases, and the runtime does so when it is lost.
//
// The Scheduler keeps the pending alarms in a timer heap, mirrored in the alarm index so that they
// survive a restart, and hands each due one to a fire callback; what a fire does is the caller's.
//
// # Concurrency
//
// Index and Scheduler are safe for concurrent use. An Index group-commits its writes: a durable
// write waits for a shared commit, a lazy one is written by the Scheduler's flusher. The Scheduler
// owns its goroutines (the loop, the flusher and the fires in flight); Close stops them and waits
// for them.
//
// # Persistence
//
// An object's own storage is the truth; the alarm index only says when to look. Before an object
// commits an alarm, EnsureIndexed makes the index hold that time or an earlier one, durably: a crash
// can leave an early or spurious entry (which fires, finds nothing due, and is rescheduled or
// dropped) but never lose an alarm.
package runindex
