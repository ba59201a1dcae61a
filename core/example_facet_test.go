package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/core"
)

// Workspace is a top-level object; each document in it gets a Processor
// facet with its own database and its own keepalive alarm.
type Workspace struct{ st *core.State }

// Processor is a facet: a child object inside a Workspace.
type Processor struct{ st *core.State }

func NewProcessor(ctx context.Context, st *core.State) (*Processor, error) {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS beats(at INTEGER PRIMARY KEY)")
	return &Processor{st: st}, err
}

// Alarm is the keepalive: record the beat (idempotently: a duplicate run
// writes the same row) and re-arm 10 s after the time it was due.
func (p *Processor) Alarm(ctx context.Context, info core.AlarmInfo) error {
	_, err := p.st.Storage().Exec(ctx, "INSERT INTO beats(at) VALUES (?) ON CONFLICT DO NOTHING", info.Scheduled.UnixMilli())
	if err != nil {
		return err
	}
	fmt.Printf("keepalive of %s (%s)\n", p.st.Name(), p.st.FacetPath())
	return p.st.SetAlarm(ctx, info.Scheduled.Add(10*time.Second))
}

func ExampleRegisterFacet() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	workspaces, _ := core.Register(rt, "workspaces", func(_ context.Context, st *core.State) (*Workspace, error) { return &Workspace{st: st}, nil })
	processors, _ := core.RegisterFacet(rt, workspaces, "doc", NewProcessor)

	ctx := context.Background()
	ws, _ := workspaces.Get("acme")
	// The parent hands out its facet's stub.
	proc, _ := core.Call(ctx, ws, func(ctx context.Context, w *Workspace) (*core.Stub[*Processor], error) {
		return processors.Get(w.st, "report.md")
	})
	core.Do(ctx, proc, func(ctx context.Context, p *Processor) error {
		return p.st.SetAlarm(ctx, p.st.Now().Add(10*time.Second)) // works in a facet, unlike the original
	})
	proc.TriggerAlarm(ctx) // in a test; in production it fires in 10 s, then every 10 s
	next, _ := core.Call(ctx, proc, func(ctx context.Context, p *Processor) (bool, error) {
		_, pending, err := p.st.GetAlarm(ctx)
		return pending, err
	})
	fmt.Println("re-armed:", next)
	// Output:
	// keepalive of report.md (doc=report.md)
	// re-armed: true
}
