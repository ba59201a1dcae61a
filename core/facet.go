package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
)

// A FacetKind is a class of facets, like a Namespace is a class of objects: its constructor, and
// the kind of object (or facet) that hosts it. A facet is a child object hosted by another object
// (its parent): a document processor inside a workspace, a per-user agent inside a tenant. It has
// its own database (a file in its parent's storage directory), queue and turns, and is evicted on
// its own; its parent hands out its stub (FacetKind.Get). Facets nest. In cluster mode a facet's
// commits are records of its root's log: it moves, replays, snapshots and is fenced with its root
// (SEMANTICS CL11).
//
// A facet's alarms and schedules behave as a top-level object's (SEMANTICS A1-A16). The root object
// (the top-level ancestor) owns the one real alarm: a facet's timers are rows of the root's timers
// table keyed by the facet's path, and the root's alarm points at the earliest (F3, F5). When one
// is due, the root's alarm run boots the facet (constructor, then handler) and delivers the call
// with the root's gate open; each row has its own retry state, so a failing facet never delays or
// re-runs a sibling's alarm or the root's own (F5). A facet's SetAlarm is a turn of the root,
// committed at once: it works or fails at once with a clear error, and never breaks unrelated calls
// later (F2). So a later failure of the facet's turn does not roll it back, except inside the
// facet's own alarm run: there its changes to the timer being run are decided with the run, and the
// run's writes and the end of its timer are decided in one commit, exactly once as a root's (F6).
type FacetKind[T any] struct {
	ns *namespace
}

// Kind is a Namespace or a FacetKind: something facets can be hosted by.
type Kind interface {
	kindNS() *namespace
}

func (n *Namespace[T]) kindNS() *namespace { return n.ns }
func (k *FacetKind[T]) kindNS() *namespace { return k.ns }

// RegisterFacet adds a kind of facet hosted by objects of parent (a Namespace or another
// FacetKind). Register facet kinds at start-up, before opening objects that use them: an alarm due
// for a facet of an unregistered kind fails (and is retried) until it is registered.
func RegisterFacet[T any](rt *Runtime, parent Kind, kind string, ctor func(context.Context, *State) (T, error)) (*FacetKind[T], error) {
	if err := validateNamespace(kind); err != nil {
		return nil, err
	}
	if ctor == nil {
		return nil, errors.New("core: RegisterFacet: nil constructor")
	}
	p := parent.kindNS()
	ns := newNamespace(rt, p.name+"."+kind, ctor)
	ns.kind, ns.parent = kind, p
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.isClosed.Load() {
		return nil, ErrClosed
	}
	if _, dup := rt.facets[ns.name]; dup {
		return nil, fmt.Errorf("core: facet kind %q already registered", ns.name)
	}
	rt.facets[ns.name] = ns
	return &FacetKind[T]{ns: ns}, nil
}

// Get returns the stub of the facet called name of the object st belongs to (st must be the State
// of an object of the kind's parent). The stub may be handed out and called by anyone.
func (k *FacetKind[T]) Get(st *State, name string) (*Stub[T], error) {
	p := st.o
	if p.ns != k.ns.parent {
		return nil, fmt.Errorf("core: facet kind %s is not hosted by %s objects", k.ns.name, p.ns.name)
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	root := p.place.timers
	root.owner = strings.TrimPrefix(root.owner+"/"+k.ns.kind+"="+url.PathEscape(name), "/")
	if len(root.owner) > MaxFacetPath {
		return nil, fmt.Errorf("%w: facet path of %d bytes is over the limit of %d", ErrInvalidName, len(root.owner), MaxFacetPath)
	}
	if strings.Count(root.owner, "/")+1 > MaxFacetDepth {
		return nil, fmt.Errorf("%w: facets nest at most %d deep", ErrInvalidName, MaxFacetDepth)
	}
	key, id, place := facetPlace(k.ns, root, name, p.place.facets)
	return &Stub[T]{ns: k.ns, name: key, id: id, place: place}, nil
}

// facetPlace places facet name of kind ns at path root.owner, in its parent's facets directory dir.
func facetPlace(ns *namespace, root timerHome, name, dir string) (key, id string, place placement) {
	key = root.owner + "\x00" + root.name
	id = objectID(ns.name, key)
	return key, id, placement{
		name:   name,
		db:     datadir.DBFile(dir, id),
		facets: datadir.FacetsDir(dir, id),
		timers: root,
	}
}

// FacetPath returns the object's path below its root, as "kind=name/kind=name"; "" if top-level.
func (st *State) FacetPath() string { return st.o.place.timers.owner }

// facetObject finds the facet object a row of o's timers table names.
func (o *object) facetObject(owner string) (*object, error) {
	ns, dir := o.ns, o.place.facets
	root := timerHome{ns: o.ns, name: o.name, id: o.id}
	var fo *object
	for i, seg := range strings.Split(owner, "/") {
		kind, esc, ok := strings.Cut(seg, "=")
		name, err := url.PathUnescape(esc)
		if !ok || err != nil {
			return nil, fmt.Errorf("core: bad facet path %q", owner)
		}
		o.rt.mu.RLock()
		child := o.rt.facets[ns.name+"."+kind]
		o.rt.mu.RUnlock()
		if child == nil {
			return nil, fmt.Errorf("core: facet kind %q is not registered", ns.name+"."+kind)
		}
		if i > 0 {
			root.owner += "/"
		}
		root.owner += seg
		key, id, place := facetPlace(child, root, name, dir)
		fo = child.object(key, id, place)
		ns, dir = child, place.facets
	}
	return fo, nil
}

// deliverFacet runs a due facet timer's handler as a turn of the facet, with the root's gate open
// (the root's row, marked running with the run's token, is committed first). It returns what the run
// decided for its own timer, for the root to record with the end of the timer.
//
// A facet's timers live in its root's table, so a facet's alarm run writes in two databases: its
// writes in the facet's, the end of its timer in the root's. What makes the run exact (SEMANTICS F6)
// is a record of the run in the facet's own database, committed with the run's writes
// (_durable_runs: per timer key, the token of the last run that committed, and what that run did to
// its own timer, held back until the run ends). A crash before the root records the end leaves the
// timer marked with the same token; the next delivery finds it in the record and ends the timer as
// the run decided, without running it again. resumed says the token is such a run's.
func (o *object) deliverFacet(t *turn, row timerRow, token int64, resumed bool, now time.Time, info AlarmInfo) (*facetRun, error) {
	fo, err := o.facetObject(row.owner)
	if err != nil {
		return nil, err
	}
	fr := &facetRun{owner: row.owner, key: row.key, token: token}
	err = o.await(t, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithValue(ctx, facetRunKey{}, fr), o.rt.opts.AlarmTimeout)
		defer cancel()
		for {
			err := fo.run(ctx, func(ctx context.Context, inst any) error {
				ft := ctx.(*turn)
				fr.t, fr.set, fr.next = ft, false, nil
				if resumed {
					if done, err := ft.ranBefore(fr); done || err != nil {
						return err
					}
				}
				if err := callHandler(ctx, fo.ns, inst, row, info); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil { // it overstayed (A10), or shutdown came: the run fails, its last segment goes
					return o.cutShort(err, now)
				}
				return ft.recordRun(fr)
			})
			if err != errEvicted {
				return err
			}
			if fo, err = o.facetObject(row.owner); err != nil {
				return err
			}
		}
	})
	return fr, err
}

// facetRunsSchema is the record of a facet's timer runs, in the facet's own database.
const facetRunsSchema = `CREATE TABLE IF NOT EXISTS main._durable_runs(key TEXT PRIMARY KEY, token INTEGER NOT NULL, next BLOB) WITHOUT ROWID`

// facetRun is a run of a facet's timer. Changes the run makes to its own timer are held here and
// recorded with it, not written to the root at once: the root writes them with the end of the
// timer, in one commit.
type facetRun struct {
	t          *turn // the facet's turn that runs the timer
	owner, key string
	token      int64
	set        bool      // the run set or deleted its own timer
	next       *timerRow // what it set; nil: deleted
}

type facetRunKey struct{}

// facetRun returns the run of timer (owner, key) if t acts for that run's turn.
func (t *turn) facetRun(owner, key string) *facetRun {
	if fr := t.facetRunOf(owner); fr != nil && fr.key == key {
		return fr
	}
	return nil
}

// facetRunOf returns the run of a timer of owner if t acts for that run's turn.
func (t *turn) facetRunOf(owner string) *facetRun {
	if owner == "" {
		return nil
	}
	fr, _ := t.Value(facetRunKey{}).(*facetRun)
	if fr == nil || fr.owner != owner || fr.t == nil || callerOf(t.Context) != fr.t {
		return nil
	}
	return fr
}

// runNext is how a run's change to its own timer is recorded.
type runNext struct {
	Deleted bool   `json:"deleted,omitempty"`
	At      int64  `json:"at"`
	First   int64  `json:"first"`
	Kind    string `json:"kind,omitempty"`
	Payload []byte `json:"payload,omitempty"`
	Cron    string `json:"cron,omitempty"`
	Missed  Missed `json:"missed,omitempty"`
}

// recordRun records, in the facet's turn, that fr's run committed, with what it did to its timer.
func (t *turn) recordRun(fr *facetRun) error {
	var next []byte
	if fr.set {
		n := runNext{Deleted: true}
		if r := fr.next; r != nil {
			n = runNext{At: r.at, First: r.first, Kind: r.kind, Payload: r.payload, Cron: r.cron, Missed: r.missed}
		}
		var err error
		if next, err = json.Marshal(n); err != nil {
			return err
		}
	}
	st, err := t.write()
	if err == nil {
		err = st.ExecOwn(facetRunsSchema)
	}
	if err == nil {
		err = st.ExecOwn("INSERT OR REPLACE INTO main._durable_runs(key, token, next) VALUES (?, ?, ?)", fr.key, fr.token, next)
	}
	return err
}

// ranBefore reports whether fr's run committed before (a crash came before its root recorded the
// end), and if so loads what it did to its timer into fr.
func (t *turn) ranBefore(fr *facetRun) (bool, error) {
	st, err := t.db()
	if err != nil {
		return false, err
	}
	var n int
	if err := st.QueryOwn("SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_runs'", nil,
		func(rows *sql.Rows) error { return rows.Scan(&n) }); err != nil || n == 0 {
		return false, err
	}
	var found bool
	var next []byte
	err = st.QueryOwn("SELECT next FROM main._durable_runs WHERE key = ? AND token = ?", []any{fr.key, fr.token},
		func(rows *sql.Rows) error { found = true; return rows.Scan(&next) })
	if err != nil || !found || next == nil {
		return found, err
	}
	var rn runNext
	if err := json.Unmarshal(next, &rn); err != nil {
		return false, fmt.Errorf("core: record of facet %s's run of timer %q: %w", fr.owner, fr.key, err)
	}
	fr.set = true
	if !rn.Deleted {
		fr.next = &timerRow{owner: fr.owner, key: fr.key, at: rn.At, first: rn.First, kind: rn.Kind, payload: rn.Payload, cron: rn.Cron, missed: rn.Missed}
	}
	return true, nil
}

// endRun records, in the root's segment t, what a facet's run decided for its own timer.
func (t *turn) endRun(fr *facetRun) error {
	switch {
	case !fr.set:
		return nil
	case fr.next != nil:
		return t.putTimer(*fr.next)
	}
	_, err := t.delTimers(fr.owner, fr.key, false)
	return err
}

// deleteFacets is the facets' part of o's DeleteAll: the facets below o leave memory now (it fails
// if one of them is busy), and their databases are removed once t commits; if t fails they stay.
func (t *turn) deleteFacets() error {
	o := t.o
	root := o.place.timers
	prefix := strings.TrimPrefix(root.owner+"/", "/")
	var gone []*object
	var chs []chan struct{}
	for _, ns := range o.rt.facetKinds() {
		for _, fo := range ns.snapshot() {
			if h := fo.place.timers; h.ns != root.ns || h.id != root.id || !strings.HasPrefix(h.owner, prefix) {
				continue
			}
			if !fo.tryEvict() {
				for i, g := range gone {
					g.closeRemoved(chs[i])
				}
				return fmt.Errorf("core: delete all: facet %s is busy", fo.place.timers.owner)
			}
			gone, chs = append(gone, fo), append(chs, fo.detach())
		}
	}
	t.drops = true
	t.emit(effect{fn: func(committed bool) {
		for i, g := range gone {
			g.closeRemoved(chs[i])
		}
		if committed {
			// The catalog forgets them first: a facet of the same name called meanwhile is new,
			// not one whose file went missing.
			if rel, err := filepath.Rel(o.rt.dir, o.place.facets); err == nil {
				if err := o.rt.ix.ForgetUnder(rel + string(filepath.Separator)); err != nil {
					o.rt.log.Error("removing deleted facets from the catalog failed", "event", "facets_remove_failed",
						"namespace", o.ns.name, "name", o.name, "error", err)
				}
			}
			if err := os.RemoveAll(o.place.facets); err != nil {
				o.rt.log.Error("removing deleted facets failed", "event", "facets_remove_failed",
					"namespace", o.ns.name, "name", o.name, "error", err)
			}
		}
	}})
	return nil
}

func (rt *Runtime) facetKinds() []*namespace {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return slices.Collect(maps.Values(rt.facets))
}
