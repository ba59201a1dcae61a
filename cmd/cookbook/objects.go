package main

import (
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
	Size       int64  `json:"size"`       // bytes of its database and WAL, as /inspect/object reports
}

// namespaces is the workshop's one list of namespaces, for /objects,
// /inspect/objects and /inspect/namespaces: those the catalog has objects
// in (the inventory races' and facets' included) and those registered, in
// order.
func (a *app) namespaces() ([]string, error) {
	nss, err := a.rt.Admin().Namespaces()
	if err != nil {
		return nil, err
	}
	for _, n := range []string{a.labs.Name(), a.limits.Name(), a.sessions.Name(), a.counters.Name(), a.rooms.Name()} {
		if !slices.Contains(nss, n) {
			nss = append(nss, n)
		}
	}
	slices.Sort(nss)
	return nss, nil
}

// objects lists a namespace's objects from the runtime's catalog, a page
// at a time: ?ns=lab&after=<the last name of the page before>&limit=20. An
// unknown namespace is a 400 that lists the namespaces there are.
func (a *app) objects(r *http.Request) (any, error) {
	nss, err := a.namespaces()
	if err != nil {
		return nil, err
	}
	ns := r.Form.Get("ns")
	if !slices.Contains(nss, ns) {
		return nil, badParam("ns", "one of "+strings.Join(nss, ", "), ns)
	}
	limit, err := intParam(r, "limit", 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	page, err := a.rt.Admin().Objects(r.Context(), ns, core.ObjectListOptions{After: r.Form.Get("after"), Limit: limit})
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
