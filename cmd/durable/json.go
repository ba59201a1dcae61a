package main

import (
	"encoding/json"
	"time"

	"github.com/durable-go/durable/cmd/internal/inspectjson"
	"github.com/durable-go/durable/core"
)

// The JSON of -json: what the workshop's HTTP inspector answers (GET /inspect/objects,
// /inspect/object, /inspect/sql, /deadletters), key for key, times in milliseconds since the epoch
// (0: none). TestJSON_SpellsAsHTTP holds the keys.

// objectJSON is a catalog entry (ls).
type objectJSON struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	ID         string `json:"id"`
	Created    int64  `json:"created"`
	LastActive int64  `json:"lastActive"`
	Size       int64  `json:"size"` // bytes of its database and WAL
}

// timerJSON is a timer with its retry state (alarms, inspect); alarms adds the object.
type timerJSON struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Path      string `json:"path"`
	Key       string `json:"key"`
	Kind      string `json:"kind"`
	At        int64  `json:"at"`
	Scheduled int64  `json:"scheduled"`
	Retries   int    `json:"retries"`
	Running   bool   `json:"running"`
	Cron      string `json:"cron"`
}

func timerOf(ns, name string, t core.TimerInfo) timerJSON {
	return timerJSON{ns, name, t.Path, t.Key, t.Kind, millis(t.At), millis(t.Scheduled), t.Retries, t.Running, t.Cron}
}

// deadLetterJSON is a dead letter (deadletters, inspect).
type deadLetterJSON struct {
	Seq       int64  `json:"seq"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Path      string `json:"path,omitempty"`
	Key       string `json:"key,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError"`
	Scheduled int64  `json:"scheduled"`
	Dropped   int64  `json:"dropped"`
}

func deadLetterOf(d core.DeadLetter) deadLetterJSON {
	return deadLetterJSON{d.Seq, d.Namespace, d.Name, d.Path, d.Key, d.Attempts, d.LastError, millis(d.Scheduled), millis(d.Dropped)}
}

// problemJSON is one finding of check.
type problemJSON struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	File      string `json:"file"`
	Problem   string `json:"problem"`
}

type webSocketJSON struct {
	Tags       []string        `json:"tags"`
	Attachment json.RawMessage `json:"attachment"`
}

// objectReportJSON is what inspect reports on one object.
type objectReportJSON struct {
	Namespace   string              `json:"namespace"`
	Name        string              `json:"name"`
	ID          string              `json:"id"`
	File        string              `json:"file"`
	Size        int64               `json:"size"`
	Created     int64               `json:"created"`
	Resident    bool                `json:"resident"`
	Alarm       *int64              `json:"alarm"` // null: none
	Tables      []inspectjson.Table `json:"tables"`
	Timers      []timerJSON         `json:"timers"`
	DeadLetters []deadLetterJSON    `json:"deadLetters"`
	WebSockets  []webSocketJSON     `json:"webSockets"`
}

func reportJSON(rep core.ObjectReport) objectReportJSON {
	out := objectReportJSON{Namespace: rep.Namespace, Name: rep.Name, ID: rep.ID, File: rep.File, Size: rep.Size,
		Created: millis(rep.Created), Resident: rep.Resident, Tables: inspectjson.Tables(rep.Tables), Timers: []timerJSON{},
		DeadLetters: []deadLetterJSON{}, WebSockets: []webSocketJSON{}}
	if !rep.Alarm.IsZero() {
		ms := rep.Alarm.UnixMilli()
		out.Alarm = &ms
	}
	for _, t := range rep.Timers {
		out.Timers = append(out.Timers, timerOf("", "", t))
	}
	for _, d := range rep.DeadLetters {
		out.DeadLetters = append(out.DeadLetters, deadLetterOf(d))
	}
	for _, ws := range rep.WebSockets {
		out.WebSockets = append(out.WebSockets, webSocketJSON{ws.Tags, ws.Attachment})
	}
	return out
}

// millis is t in milliseconds since the epoch, 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() || t.UnixNano() == 0 {
		return 0
	}
	return t.UnixMilli()
}
