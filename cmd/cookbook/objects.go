package main

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/durable-go/durable/core"
)

// objectEntry is one object of GET /objects.
type objectEntry struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Created    int64  `json:"created"`    // unix ms
	LastActive int64  `json:"lastActive"` // unix ms
	Size       int64  `json:"size"`       // bytes, as of its last eviction
}

// listers are the workshop's namespaces by name, for GET /objects.
func (a *app) listers() map[string]func(context.Context, core.ObjectListOptions) ([]core.ObjectInfo, error) {
	return map[string]func(context.Context, core.ObjectListOptions) ([]core.ObjectInfo, error){
		a.labs.Name():     a.labs.List,
		a.limits.Name():   a.limits.List,
		a.sessions.Name(): a.sessions.List,
		a.counters.Name(): a.counters.List,
		a.rooms.Name():    a.rooms.List,
	}
}

// objects lists a namespace's objects from the runtime's catalog, a page
// at a time: ?ns=lab&after=<the last name of the page before>&limit=20.
func (a *app) objects(r *http.Request) (any, error) {
	ls := a.listers()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range ls {
			if !yield(n) {
				return
			}
		}
	})
	ns := r.Form.Get("ns")
	list, ok := ls[ns]
	if !ok {
		return nil, badParam("ns", "one of "+strings.Join(names, ", "), ns)
	}
	limit, err := intParam(r, "limit", 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	page, err := list(r.Context(), core.ObjectListOptions{After: r.Form.Get("after"), Limit: limit})
	if err != nil {
		return nil, err
	}
	return objectPage(ns, page, limit), nil
}

// objectPage is the JSON of one page of a namespace's catalog; next is the
// name to pass as after for the page that follows, "" on the last page.
func objectPage(ns string, page []core.ObjectInfo, limit int) map[string]any {
	out := make([]objectEntry, len(page))
	for i, o := range page {
		out[i] = objectEntry{Name: o.Name, ID: o.ID, Created: o.Created.UnixMilli(), LastActive: o.LastActive.UnixMilli(), Size: o.Size}
	}
	next := ""
	if len(page) == limit {
		next = page[len(page)-1].Name
	}
	return map[string]any{"namespace": ns, "objects": out, "next": next}
}
