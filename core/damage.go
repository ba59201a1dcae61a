package core

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/sqlstore"
)

// Damage (SEMANTICS O3) is found in three places, none of which reads a whole file on the request
// path, so an object's first activation costs the same whatever its size:
//
//   - at a file's first open in this runtime, structural checks that read a few hundred bytes: the
//     database header (magic, page size, no pages missing past its end) and the WAL header;
//   - as the runtime reads and writes: SQLite's SQLITE_CORRUPT or SQLITE_NOTADB met by a call or an
//     alarm becomes an ErrDamaged naming the file;
//   - off the request path: after a file's first open, SQLite's quick check runs on it in the
//     background, one file at a time, holding the object's gate (see fullCheck); Admin.Check runs
//     the integrity check on every file.
//
// A file found damaged in any of these ways is remembered: its object is closed (at once if it is
// idle, else once its running turn ends) and refuses every call with ErrDamaged until
// Admin.Quarantine or Admin.Restore replaces the file.

// maxQueuedChecks bounds the files waiting for their background check. A file that finds the
// queue full is not marked as opened: its next activation checks its headers again and queues it.
const maxQueuedChecks = 4096

// checkDelay is how long after a file's first open its background check may start: the
// activation that opened it, and the turns right after, keep the CPU. After each check, the next
// waits as long as that one took, so the checks take at most half of one core.
const checkDelay = 100 * time.Millisecond

// checkQueue is the background check's queue, run by at most one goroutine at a time, which a
// timer starts checkDelay after the first file is queued: queueing starts no goroutine on the
// request path.
type checkQueue struct {
	mu      sync.Mutex
	queue   []queuedCheck
	running bool        // the timer is set, or runChecks runs
	timer   *time.Timer // starts runChecks; stopChecks stops it
	begun   int         // quick checks started on a file (read by tests)
	ended   int         // of those, checks that read the file to a verdict
}

type queuedCheck struct {
	o   *object
	due time.Time // by the wall clock: this is pacing, not behaviour
}

// openDB opens the object's database, refusing one that is damaged (see above). A missing file
// with a WAL left is opened (SQLite recovers the committed pages from the WAL) and checked. A
// damaged one is logged.
func (o *object) openDB() (*store, bool, error) {
	st, fresh, err := o.openChecked()
	if err != nil {
		o.damaged(err)
	}
	return st, fresh, err
}

// damaged records an object database refused as damaged.
func (o *object) damaged(err error) {
	var de *DamagedError
	if errors.As(err, &de) {
		o.rt.log.Error("an object's database is damaged: the object refuses calls until restored", "event", "damaged",
			"namespace", o.ns.name, "name", o.place.name, "file", de.Path, "reason", de.Reason)
	}
}

func (o *object) openChecked() (*store, bool, error) {
	path := o.place.db
	if why, ok := o.rt.damaged.Load(path); ok {
		return nil, false, &DamagedError{Path: path, Reason: why.(string)}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if datadir.FileSize(path) == 0 && o.rt.cluster == nil { // no WAL either (in cluster mode the file is a cache)
			_, known, err := o.rt.ix.Lookup(o.ns.name, o.id)
			if err != nil {
				return nil, false, err
			}
			if known {
				return nil, false, &DamagedError{Path: path, Reason: "missing, although the catalog lists the object"}
			}
		}
	case err != nil:
		return nil, false, err
	case fi.Size() == 0:
		return nil, false, &DamagedError{Path: path, Reason: "empty (0 bytes)"}
	}
	// The checks run at a file's first open in this runtime: after that, its damage would be the
	// runtime's own doing. Committed rows may live only in the WAL (closing keeps a small one): a
	// log SQLite would ignore is damage, not an empty object. They read the headers through the
	// connection's own descriptor, before SQLite reads the file's pages or its log.
	var check sqlstore.FileCheck
	_, done := o.rt.checked.Load(path)
	if !done {
		check = datadir.Damage(path)
	}
	st, fresh, err := openStore(path, o.rt.opts.Synchronous, o.rt.template, check)
	if err != nil {
		var de *sqlstore.DamageError
		switch {
		case errors.As(err, &de):
			return nil, false, &DamagedError{Path: path, Reason: de.Reason}
		case datadir.IsCorrupt(err):
			return nil, false, &DamagedError{Path: path, Reason: err.Error()}
		}
		return nil, false, err
	}
	if !done && (fresh || o.rt.queueCheck(o)) {
		o.rt.checked.Store(path, struct{}{})
	}
	return st, fresh, nil
}

// corrupted turns err, the failure of a call or an alarm run of o, into an ErrDamaged if SQLite
// found o's file corrupt while reading or writing it, and closes the object, which refuses from
// then on. It is called with the gate released.
func (o *object) corrupted(err error) error {
	if err == nil || errors.Is(err, ErrDamaged) || !datadir.IsCorrupt(err) {
		return err
	}
	de := &DamagedError{Path: o.place.db, Reason: "while reading: " + err.Error()}
	o.rt.markDamaged(o, de)
	return de
}

// markDamaged remembers that o's file is damaged, closes the object (at once if it is idle, else by
// a hold of its gate once its turns are done), then logs it: every call after the record refuses,
// as the object's next activation does.
func (rt *Runtime) markDamaged(o *object, de *DamagedError) {
	if _, had := rt.damaged.LoadOrStore(de.Path, de.Reason); had {
		return
	}
	if o.tryEvict() {
		o.evict("damaged")
		o.damaged(de)
		return
	}
	if rt.cluster != nil { // cluster mode: closed by its next eviction, as a hold would claim its lease
		o.damaged(de)
		return
	}
	rt.goWork(func() {
		_ = o.hold(rt.base, func() error { o.unload(); return nil })
		o.damaged(de)
	})
}

// forgetFile forgets what the runtime knows of a database file that was replaced or moved away:
// that it was checked, or found damaged.
func (rt *Runtime) forgetFile(path string) {
	rt.checked.Delete(path)
	rt.damaged.Delete(path)
}

// queueCheck queues o's file for the background check and reports whether it could.
func (rt *Runtime) queueCheck(o *object) bool {
	q := &rt.checks
	q.mu.Lock()
	if len(q.queue) >= maxQueuedChecks || rt.base.Err() != nil { // full, or Shutdown has begun
		q.mu.Unlock()
		return false
	}
	q.queue = append(q.queue, queuedCheck{o, time.Now().Add(checkDelay)})
	if !q.running {
		// Owned as goWork's work is: Shutdown stops the timer (stopChecks), or waits for runChecks
		// and cancels the check under way.
		q.running = true
		rt.calls.Add(1)
		q.timer = time.AfterFunc(checkDelay, func() {
			defer rt.leave()
			rt.runChecks()
		})
	}
	q.mu.Unlock()
	return true
}

// stopChecks drops the queued checks if their timer has not started runChecks yet (Shutdown: the
// files' next runtime checks them).
func (rt *Runtime) stopChecks() {
	q := &rt.checks
	q.mu.Lock()
	stopped := q.timer != nil && q.timer.Stop()
	if stopped {
		q.queue, q.running, q.timer = nil, false, nil
	}
	q.mu.Unlock()
	if stopped {
		rt.leave()
	}
}

// runChecks checks the queued files one at a time, paced (checkDelay), until the queue is empty or
// the runtime shuts down.
func (rt *Runtime) runChecks() {
	q := &rt.checks
	var rest time.Duration
	for {
		q.mu.Lock()
		q.timer = nil
		if len(q.queue) == 0 || rt.base.Err() != nil {
			q.queue, q.running = nil, false
			q.mu.Unlock()
			return
		}
		c := q.queue[0]
		q.queue[0] = queuedCheck{}
		q.queue = q.queue[1:]
		q.mu.Unlock()
		if wait := max(time.Until(c.due), rest); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-rt.base.Done(): // Shutdown: the queue is dropped above, no check starts
				t.Stop()
				continue
			}
		}
		start := time.Now()
		rt.fullCheck(rt.base, c.o)
		rest = min(time.Since(start), time.Second)
	}
}

// fullCheck runs SQLite's quick check on o's file and marks the file damaged if it fails. An open
// database holds its file alone (sqlstore.Open): if an object is live at o's address, the check
// takes its gate, as a hold that claims nothing, and runs on its connection if its database is open
// (a call that comes meanwhile waits for the check, once per file and runtime). Otherwise it runs
// on a read-only connection of its own, after any pending close of the file; an activation that
// comes meanwhile waits for the file (SQLite's busy timeout) until the check's connection closes.
// A verdict on a file replaced meanwhile (Restore, Quarantine) is dropped. Once ctx is done (the
// runtime's, at Shutdown), SQLite interrupts the check and its verdict is dropped; and runChecks
// starts none after Shutdown: closing a runtime never waits for a file to be read through.
func (rt *Runtime) fullCheck(ctx context.Context, o *object) {
	path := o.place.db
	before, err := os.Stat(path)
	if err != nil {
		return
	}
	var verdict string
	scan := func(rows *sql.Rows) error { return rows.Scan(&verdict) }
	quick := func(query func() error) error {
		rt.checks.count(&rt.checks.begun)
		err := query()
		if err == nil {
			rt.checks.count(&rt.checks.ended)
		}
		return err
	}
	own := func() error {
		o.ns.waitClosed(o.id)
		r, err := sqlstore.OpenReadOnly(path)
		if err == nil {
			err = quick(func() error { return r.Query(ctx, "PRAGMA main.quick_check(1)", nil, scan) })
			r.Close()
		}
		return err
	}
	for {
		cur := o.ns.live(o.name)
		if cur == nil {
			err = own()
			break
		}
		err = cur.holdLocal(ctx, func() error {
			if st := cur.openStore(); st != nil {
				return quick(func() error { return st.QueryOwnContext(ctx, "PRAGMA main.quick_check(1)", nil, scan) })
			}
			return own()
		})
		if err != errEvicted {
			o = cur
			break
		}
	}
	if ctx.Err() != nil { // Shutdown: the file's next runtime checks it
		return
	}
	var reason string
	switch {
	case err != nil && datadir.IsCorrupt(err):
		reason = "quick check: " + err.Error()
	case err != nil:
		rt.log.Warn("an object's database could not be checked", "event", "check_failed",
			"namespace", o.ns.name, "name", o.place.name, "file", path, "error", err)
		return
	case verdict != "ok":
		reason = "quick check: " + verdict
	default:
		return
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		return
	}
	rt.markDamaged(o, &DamagedError{Path: path, Reason: reason})
}

// count adds one to n, one of q's counts.
func (q *checkQueue) count(n *int) {
	q.mu.Lock()
	*n++
	q.mu.Unlock()
}

// checkDBFile opens a database file on its own and runs SQLite's quick check on it.
func checkDBFile(path string) error {
	damage, err := datadir.CheckFile(path)
	if damage != "" {
		return &DamagedError{Path: path, Reason: damage}
	}
	return err
}
