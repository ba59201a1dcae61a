package core

import (
	"context"
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
// its own; its parent hands out its stub (FacetKind.Get). Facets nest.
//
// A facet's alarms and schedules behave as a top-level object's (SEMANTICS A1-A16). The root object
// (the top-level ancestor) owns the one real alarm: a facet's timers are rows of the root's timers
// table keyed by the facet's path, and the root's alarm points at the earliest (F3, F5). When one
// is due, the root's alarm run boots the facet (constructor, then handler) and delivers the call
// with the root's gate open; each row has its own retry state, so a failing facet never delays or
// re-runs a sibling's alarm or the root's own (F5). A facet's SetAlarm is a turn of the root,
// committed at once: it works or fails at once with a clear error, and never breaks unrelated calls
// later (F2). So a later failure of the facet's turn does not roll it back: a facet's alarm handler
// must tolerate an early or duplicate run (F4).
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
	if rt.cluster != nil {
		return nil, fmt.Errorf("%w: facets", ErrClusterMode)
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
// (the root's row, marked running, is committed first: after a crash the timer runs again).
func (o *object) deliverFacet(t *turn, row timerRow, now time.Time, info AlarmInfo) error {
	fo, err := o.facetObject(row.owner)
	if err != nil {
		return err
	}
	return o.await(t, func(ctx context.Context) error {
		return o.timed(ctx, now, func(ctx context.Context) error {
			for {
				err := fo.run(ctx, func(ctx context.Context, inst any) error { return callHandler(ctx, fo.ns, inst, row, info) })
				if err != errEvicted {
					return err
				}
				if fo, err = o.facetObject(row.owner); err != nil {
					return err
				}
			}
		})
	})
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
