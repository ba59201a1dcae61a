package main

import (
	"errors"
	"net/http"

	"modernc.org/sqlite"

	"github.com/durable-go/durable/cmd/internal/inspectjson"
	"github.com/durable-go/durable/core"
)

// The inspector: what the runtime holds, read-only, as JSON (/inspect/...)
// and as a page (/inspect). Objects are read through Admin.Inspect and
// Admin.Query, in a turn of their own that cannot write.

// inspectNamespaces lists the catalog's namespaces and the runtime's stats.
func (a *app) inspectNamespaces(*http.Request) (any, error) {
	nss, err := a.namespaces()
	if err != nil {
		return nil, err
	}
	dls, err := a.rt.Admin().DeadLetters()
	if err != nil {
		return nil, err
	}
	s := a.rt.Stats()
	return map[string]any{"namespaces": nss, "deadLetters": len(dls), "stats": map[string]int64{
		"turns": s.Turns, "commits": s.Commits, "constructs": s.Constructs, "evictions": s.Evictions,
		"resident": s.Resident, "openDBs": s.OpenDBs, "alarms": s.Alarms}}, nil
}

// inspectObjects lists a namespace's objects a page at a time:
// ?ns=&after=&limit=20, as /objects does.
func (a *app) inspectObjects(r *http.Request) (any, error) { return a.objects(r) }

type inspectTimer struct {
	Path      string `json:"path"`
	Key       string `json:"key"`
	Kind      string `json:"kind"`
	At        int64  `json:"at"`        // unix ms
	Scheduled int64  `json:"scheduled"` // unix ms, first due
	Retries   int    `json:"retries"`
	Running   bool   `json:"running"`
	Cron      string `json:"cron"`
}

type inspectSocket struct {
	Tags       []string `json:"tags"`
	Attachment any      `json:"attachment"`
}

// inspectObject reports one object: ?ns=&name=.
func (a *app) inspectObject(r *http.Request) (any, error) {
	ns, name := r.Form.Get("ns"), r.Form.Get("name")
	rep, err := a.rt.Admin().Inspect(r.Context(), ns, name)
	if err != nil {
		return nil, inspectError(err)
	}
	tables := inspectjson.Tables(rep.Tables)
	timers := make([]inspectTimer, len(rep.Timers))
	for i, t := range rep.Timers {
		timers[i] = inspectTimer{t.Path, t.Key, t.Kind, t.At.UnixMilli(), t.Scheduled.UnixMilli(), t.Retries, t.Running, t.Cron}
	}
	sockets := make([]inspectSocket, len(rep.WebSockets))
	for i, ws := range rep.WebSockets {
		sockets[i] = inspectSocket{Tags: ws.Tags}
		if ws.Attachment != nil {
			sockets[i].Attachment = ws.Attachment
		}
	}
	letters := make([]deadLetterEntry, len(rep.DeadLetters))
	for i, d := range rep.DeadLetters {
		letters[i] = deadLetterEntry{Seq: d.Seq, Key: d.Key, Attempts: d.Attempts, LastError: d.LastError, Scheduled: d.Scheduled.UnixMilli(), Dropped: d.Dropped.UnixMilli()}
	}
	var alarm any
	if !rep.Alarm.IsZero() {
		alarm = rep.Alarm.UnixMilli()
	}
	return map[string]any{"namespace": rep.Namespace, "name": rep.Name, "id": rep.ID, "file": rep.File, "size": rep.Size,
		"created": rep.Created.UnixMilli(), "resident": rep.Resident, "alarm": alarm, "tables": tables, "timers": timers,
		"deadLetters": letters, "webSockets": sockets}, nil
}

// deadLetterEntry is an object's dead letter in /inspect/object.
type deadLetterEntry struct {
	Seq       int64  `json:"seq"`
	Key       string `json:"key"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError"`
	Scheduled int64  `json:"scheduled"` // unix ms
	Dropped   int64  `json:"dropped"`   // unix ms
}

// inspectSQL runs a read-only query on one object: ?ns=&name=&q=&limit=100.
// Text is a JSON string; a blob is its text if it is UTF-8, else x'<hex>'.
func (a *app) inspectSQL(r *http.Request) (any, error) {
	ns, name, q := r.Form.Get("ns"), r.Form.Get("name"), r.Form.Get("q")
	limit, err := intParam(r, "limit", 100, 1, core.MaxQueryRows)
	if err != nil {
		return nil, err
	}
	res, err := a.rt.Admin().Query(r.Context(), ns, name, limit, q)
	if err != nil {
		return nil, inspectError(err)
	}
	return inspectjson.Query(res), nil
}

// inspectError answers what the caller got wrong as 400 or 404: a write
// refused, bad SQL, an object without storage.
func inspectError(err error) error {
	switch {
	case errors.Is(err, core.ErrNoObject):
		return &httpError{http.StatusNotFound, err.Error()}
	case errors.Is(err, core.ErrDamaged):
		return &httpError{http.StatusConflict, err.Error()}
	case errors.Is(err, core.ErrReadOnly), errors.Is(err, core.ErrArgCount), errors.Is(err, core.ErrNoStatement),
		errors.Is(err, core.ErrInvalidName):
		return &httpError{http.StatusBadRequest, err.Error()}
	}
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == 1 { // SQLITE_ERROR: the query's own fault (syntax, no such table)
		return &httpError{http.StatusBadRequest, err.Error()}
	}
	return err
}
