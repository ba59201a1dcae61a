package core

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Facets: child objects with their own storage.
//
// A facet is an object hosted by another object (its parent): a document
// processor inside a workspace, a per-user agent inside a tenant. It has
// its own database (a file in its parent's storage directory), its own
// queue and turns, and is evicted on its own; it is reached through its
// parent, which hands out its stub (FacetKind.Get). Facets nest: a facet
// can host facets.
//
// Facets have alarms and schedules that behave as a top-level object's do
// (SEMANTICS A1-A16). Under the hood the root object (the top-level
// ancestor) owns the one real alarm: a facet's timers are rows of the
// root's timers table, keyed by the facet's path, and the root's alarm
// always points at the earliest row (F3, F5). When a facet's timer is due,
// the root's alarm run boots the facet (constructor, then handler) and
// delivers the call with the root's gate open; each row keeps its own
// retry state, so a failing facet never delays or re-runs a sibling's
// alarm or the root's own (F5).
//
// A facet's SetAlarm is a turn of the root, committed at once: it works or
// fails at once with a clear error, and can never break unrelated calls
// later (F2). It is therefore not rolled back if the facet's own turn
// fails afterwards: a facet's alarm handler must tolerate an early or
// duplicate run (F4), as every alarm handler should.

// MaxFacetPath is the longest facet path, in bytes, and MaxFacetDepth the
// deepest nesting.
const (
	MaxFacetPath  = 1024
	MaxFacetDepth = 8
)

// A FacetKind is a class of facets, like a Namespace is a class of
// objects: its constructor, and the kind of object (or facet) that hosts
// it.
type FacetKind[T any] struct {
	ns *namespace
}

// Kind is a Namespace or a FacetKind: something facets can be hosted by.
type Kind interface {
	kindNS() *namespace
}

func (n *Namespace[T]) kindNS() *namespace { return n.ns }
func (k *FacetKind[T]) kindNS() *namespace { return k.ns }

// facetInfo places a facet object in its tree.
type facetInfo struct {
	root  *namespace // the root object's namespace
	rname string     // the root object's name
	rid   string     // the root object's id
	owner string     // the path below the root: "kind=name/kind=name"
	leaf  string     // the facet's own name
	dir   string     // the directory of its database
}

// RegisterFacet adds a kind of facet hosted by objects of parent (a
// Namespace or another FacetKind). Register facet kinds before opening
// objects that use them, at start-up: an alarm due for a facet whose kind
// is not registered fails (and is retried) until it is.
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
	if rt.closed {
		return nil, ErrClosed
	}
	if _, dup := rt.facets[ns.name]; dup {
		return nil, fmt.Errorf("core: facet kind %q already registered", ns.name)
	}
	rt.facets[ns.name] = ns
	return &FacetKind[T]{ns: ns}, nil
}

// Get returns the stub of the facet called name of the object st belongs
// to (st must be the State of an object of the kind's parent). The stub
// may be handed out and called by anyone.
func (k *FacetKind[T]) Get(st *State, name string) (*Stub[T], error) {
	p := st.o
	if p.ns != k.ns.parent {
		return nil, fmt.Errorf("core: facet kind %s is not hosted by %s objects", k.ns.name, p.ns.name)
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	seg := k.ns.kind + "=" + url.PathEscape(name)
	fi := &facetInfo{leaf: name}
	if pf := p.facet; pf != nil {
		fi.root, fi.rname, fi.rid = pf.root, pf.rname, pf.rid
		fi.owner = pf.owner + "/" + seg
		fi.dir = filepath.Join(pf.dir, p.id+".facets")
	} else {
		fi.root, fi.rname, fi.rid = p.ns, p.name, p.id
		fi.owner = seg
		fi.dir = filepath.Join(p.ns.dir, p.id+".facets")
	}
	if len(fi.owner) > MaxFacetPath {
		return nil, fmt.Errorf("%w: facet path of %d bytes is over the limit of %d", ErrInvalidName, len(fi.owner), MaxFacetPath)
	}
	if strings.Count(fi.owner, "/")+1 > MaxFacetDepth {
		return nil, fmt.Errorf("%w: facets nest at most %d deep", ErrInvalidName, MaxFacetDepth)
	}
	key := fi.owner + "\x00" + fi.rname
	return &Stub[T]{ns: k.ns, name: key, id: objectID(k.ns.name, key), facet: fi}, nil
}

// FacetPath returns the object's path below its root object, as
// "kind=name/kind=name", or "" for a top-level object.
func (st *State) FacetPath() string {
	if st.o.facet == nil {
		return ""
	}
	return st.o.facet.owner
}

// dbPath is where the object's database lives.
func (o *object) dbPath() string {
	if o.facet != nil {
		return filepath.Join(o.facet.dir, o.id+".sqlite")
	}
	return filepath.Join(o.ns.dir, o.id+".sqlite")
}

// rootDo runs fn as a turn of the facet's root object: the facet's timers
// live in the root's timers table.
func (o *object) rootDo(fn func(root *object) error) error {
	fi := o.facet
	if o.cur == nil {
		return ErrNotInTurn
	}
	return fi.root.with(fi.rname, fi.rid, func(root *object) error {
		return root.run(context.Background(), func(context.Context, any) error { return fn(root) })
	})
}

// facetObject finds the facet object a timer row's owner names.
func (o *object) facetObject(owner string) (*object, error) {
	ns := o.ns
	fi := &facetInfo{root: o.ns, rname: o.name, rid: o.id, dir: filepath.Join(o.ns.dir, o.id+".facets")}
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
			fi.owner += "/"
			fi.dir = filepath.Join(fi.dir, fo.id+".facets")
		}
		fi.owner += seg
		key := fi.owner + "\x00" + fi.rname
		cp := *fi
		cp.leaf = name
		fo = child.objectWith(key, objectID(child.name, key), &cp)
		ns = child
	}
	return fo, nil
}

// deliverFacet runs a due facet timer: the row is taken off (or advanced)
// in a segment of the root, then the facet's handler runs as a turn of the
// facet with the root's gate open.
func (o *object) deliverFacet(ctx context.Context, row timerRow, now time.Time, info AlarmInfo) error {
	fo, err := o.facetObject(row.owner)
	if err != nil {
		return err
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.rt.opts.AlarmTimeout)
	defer cancel()
	return o.await(ctx, func(context.Context) error {
		for {
			err := fo.run(hctx, func(ctx context.Context, inst any) error {
				if row.key == "" {
					h, ok := inst.(Alarmer)
					if !ok {
						return fmt.Errorf("core: facet kind %s does not implement core.Alarmer", fo.ns.name)
					}
					return h.Alarm(ctx, info)
				}
				return fo.callTimerHandler(ctx, inst, row, info)
			})
			if err == errEvicted {
				fo, err = o.facetObject(row.owner)
				if err != nil {
					return err
				}
				continue
			}
			if err == nil && hctx.Err() != nil {
				err = fmt.Errorf("core: facet timer run took %v, over the limit of %v", time.Since(now).Round(time.Millisecond), o.rt.opts.AlarmTimeout)
			}
			return err
		}
	})
}

// objectWith is object for facets: it records where the facet sits.
func (ns *namespace) objectWith(name, id string, fi *facetInfo) *object {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if o, ok := ns.objects[name]; ok {
		return o
	}
	o := newObject(ns, name, id)
	o.facet = fi
	ns.objects[name] = o
	ns.rt.stats.resident.Add(1)
	return o
}

// deleteFacets removes the facets below o (their databases, evicting
// those in memory) as part of o's DeleteAll. It fails if one of them is
// busy.
func (o *object) deleteFacets() error {
	dir := filepath.Join(filepath.Dir(o.dbPath()), o.id+".facets")
	prefix := ""
	if o.facet != nil {
		prefix = o.facet.owner + "/"
	}
	for _, ns := range o.rt.facetKinds() {
		for _, fo := range ns.snapshot() {
			fi := fo.facet
			if fi == nil || fi.rid != o.rootID() || !strings.HasPrefix(fi.owner, prefix) {
				continue
			}
			if !fo.tryEvict(false) {
				return fmt.Errorf("core: delete all: facet %s is busy", fi.owner)
			}
			fo.closeStore()
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("core: delete all: facets: %w", err)
	}
	return nil
}

func (o *object) rootID() string {
	if o.facet != nil {
		return o.facet.rid
	}
	return o.id
}

func (rt *Runtime) facetKinds() []*namespace {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	out := make([]*namespace, 0, len(rt.facets))
	for _, ns := range rt.facets {
		out = append(out, ns)
	}
	return out
}
