package core

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/runindex"
)

// The catalog is a table of the runtime's file (_runtime.sqlite): every object (and facet) with a
// database, by namespace and id, with its name, its file, when it was created, when it was last
// active and its size. An object enters it durably with the commit that creates its database (one
// group-committed write per new object, none per call); its activity and size are written lazily
// when it is evicted. Like the alarm index, it is rebuilt from the objects' files if the runtime's
// file is lost.

// ObjectInfo is an object's entry in the catalog.
type ObjectInfo struct {
	Name       string
	ID         string
	Created    time.Time // when its database was created
	LastActive time.Time // its last turn, to within the runtime's coarse clock; for an object not in memory, as of its eviction
	Size       int64     // bytes of its database and WAL now, as Admin.Inspect reports them
}

// ObjectListOptions page through Namespace.List: pass the last name of a page as After to get the next.
type ObjectListOptions struct {
	After string // list names after this one ("" from the start)
	Limit int    // at most this many (default 100, at most 10,000)
}

// List returns the namespace's objects with storage, in name order (byte order), a page at a time.
// It may be called at any time, from inside a turn or not; it reads the catalog, never an object
// (the size is its files', from the file system).
// An object whose first turn has not committed yet is not listed.
func (n *Namespace[T]) List(ctx context.Context, opts ObjectListOptions) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rt := n.ns.rt
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	es, err := rt.ix.List(n.ns.name, opts.After, min(limit, 10000))
	if err != nil {
		return nil, fmt.Errorf("core: list %s: %w", n.ns.name, err)
	}
	out := make([]ObjectInfo, len(es))
	for i, e := range es {
		out[i] = ObjectInfo{Name: e.Name, ID: e.ID, Created: time.Unix(0, e.Created), LastActive: time.Unix(0, e.Active),
			Size: datadir.FileSize(filepath.Join(rt.dir, e.File))}
		if active, ok := n.ns.residentActive(e.Name); ok && active.After(out[i].LastActive) {
			out[i].LastActive = active
		}
	}
	return out, nil
}

// All iterates over every object of the namespace with storage, in name order, reading the catalog
// a page at a time. It stops at the first error, which it yields.
func (n *Namespace[T]) All(ctx context.Context) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		after := ""
		for {
			page, err := n.List(ctx, ObjectListOptions{After: after, Limit: 1000})
			if err != nil {
				yield(ObjectInfo{}, err)
				return
			}
			for _, o := range page {
				if !yield(o, nil) {
					return
				}
			}
			if len(page) < 1000 {
				return
			}
			after = page[len(page)-1].Name
		}
	}
}

// residentActive returns the last activity of the object called name if it is in memory.
func (ns *namespace) residentActive(name string) (time.Time, bool) {
	ns.mu.Lock()
	o := ns.objects[name]
	ns.mu.Unlock()
	if o == nil {
		return time.Time{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held {
		return o.rt.coarseNow(), true
	}
	return time.Unix(0, o.lastActive), true
}

// initMeta writes a new database's identity: the runtime's tables are there, in the batch's
// transaction.
func (o *object) initMeta(st *store) error {
	return st.ExecOwn(`INSERT OR IGNORE INTO main._durable_meta(k, v) VALUES ('namespace', ?), ('name', ?), ('created', ?)`,
		o.ns.name, o.name, o.rt.now().UnixNano())
}

// catalogEntry is the object's catalog entry as of now.
func (o *object) catalogEntry() runindex.Object {
	rel, err := filepath.Rel(o.rt.dir, o.place.db)
	if err != nil {
		rel = o.place.db
	}
	now := o.rt.now().UnixNano()
	return runindex.Object{Namespace: o.ns.name, ID: o.id, Name: o.name, File: rel, Created: now, Active: now}
}

// cataloged enters a new object in the catalog, durably, before the commit that creates it: the
// catalog knows every object with committed data.
func (o *object) cataloged() error {
	return o.rt.ix.Catalog(o.catalogEntry(), true)
}

// touchCatalog records the object's last activity and size as it leaves memory (lazily).
func (o *object) touchCatalog() {
	o.mu.Lock()
	active := o.lastActive
	o.mu.Unlock()
	o.rt.ix.Touch(o.ns.name, o.id, active, datadir.FileSize(o.place.db))
}

// Quarantine moves an object's files (its database, WAL, and its facets' directory) out of the way,
// into Dir/_quarantine/<namespace>/<id>-<time>/, and forgets it (catalog, alarm index): the next
// call to the name starts a new, empty object. It returns the directory the files went to. Use it
// for an object that refuses with ErrDamaged, before restoring it (Admin.Restore) or to let it
// start again empty. It waits for the object's gate, so no turn of it runs meanwhile.
func (a *Admin) Quarantine(ctx context.Context, namespace, name string) (string, error) {
	rt := a.rt
	if rt.cluster != nil {
		return "", fmt.Errorf("%w: Quarantine", ErrClusterMode)
	}
	var dest string
	err := rt.holdObject(ctx, "quarantine", namespace, name, func(o *object) error {
		var err error
		dest, err = o.quarantine()
		return err
	})
	return dest, err
}

// Restore replaces an object's database with the file at src (an object's file from a backup, or
// one written by Admin.Export), after checking it: the object's current files, if any, are
// quarantined first. The object's alarm comes back with it. It waits for the object's gate.
func (a *Admin) Restore(ctx context.Context, namespace, name, src string) error {
	rt := a.rt
	if rt.cluster != nil {
		return fmt.Errorf("%w: Restore", ErrClusterMode)
	}
	return rt.holdObject(ctx, "restore", namespace, name, func(o *object) error {
		path := o.place.db
		if err := datadir.CopyFileSync(src, path+".restore"); err != nil {
			return err
		}
		defer os.Remove(path + ".restore")
		if err := checkDBFile(path + ".restore"); err != nil {
			return err
		}
		if datadir.FileSize(path) > 0 || datadir.DirExists(o.place.facets) {
			if _, err := o.quarantine(); err != nil {
				return err
			}
		}
		if err := os.Rename(path+".restore", path); err != nil {
			return err
		}
		datadir.SyncDir(filepath.Dir(path))
		e := o.catalogEntry()
		e.Size = datadir.FileSize(path)
		if err := o.rt.ix.Catalog(e, true); err != nil {
			return err
		}
		// The restored timers: a run of the object tells the scheduler.
		return o.runTurnNoCtor(func(t *turn) error {
			return o.invoke(t, func(context.Context, any) error {
				_, err := t.db()
				t.timers = true
				return err
			})
		})
	})
}

// quarantine moves the object's files aside and forgets it. The gate is held and the database
// closed.
func (o *object) quarantine() (string, error) {
	rt := o.rt
	dest, err := datadir.Quarantine(rt.dir, o.ns.name, o.id, o.place.db, o.place.facets, rt.now())
	if err != nil {
		return "", err
	}
	rt.forgetFile(o.place.db)
	if rel, err := filepath.Rel(rt.dir, o.place.facets); err == nil {
		if err := rt.ix.ForgetUnder(rel + string(filepath.Separator)); err != nil {
			return "", err
		}
	}
	if err := rt.ix.Forget(o.ns.name, o.id); err != nil {
		return "", err
	}
	rt.sched.Drop(o.ns.name, o.id)
	rt.log.Warn("object quarantined", "event", "quarantined", "namespace", o.ns.name, "name", o.name, "to", dest)
	return dest, nil
}

// holdObject runs fn holding the gate of a registered namespace's object, without building its
// instance, with its database closed.
func (rt *Runtime) holdObject(ctx context.Context, op, namespace, name string, fn func(o *object) error) error {
	fail := func(err error) error { return &Error{Op: op, Namespace: namespace, Name: name, Err: err} }
	rt.mu.RLock()
	ns := rt.namespaces[namespace]
	rt.mu.RUnlock()
	if ns == nil {
		return fail(fmt.Errorf("core: namespace %q is not registered", namespace))
	}
	if err := validateName(name); err != nil {
		return fail(err)
	}
	if err := rt.enter(); err != nil {
		return fail(err)
	}
	defer rt.leave()
	id := objectID(namespace, name)
	err := viaCaller(ctx, func(ctx context.Context) error {
		return ns.with(name, id, placement{}, func(o *object) error {
			return o.hold(ctx, func() error {
				o.unload()
				ns.waitClosed(o.id)
				return fn(o)
			})
		})
	})
	if err != nil {
		return fail(err)
	}
	return nil
}
