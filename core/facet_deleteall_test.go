package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// DeleteAll rolls back for facets: a DeleteAll in a turn that then fails leaves the
// facets' databases and timers as they were; in a turn that commits, it
// removes them.

// folder is the parent object P; doc is its facet kind.
type folder struct{ st *core.State }

func (f *folder) Alarm(context.Context, core.AlarmInfo) error { return nil }

type doc struct{ st *core.State }

func (d *doc) Alarm(context.Context, core.AlarmInfo) error { return nil }

func newRowTable(ctx context.Context, st *core.State) error {
	_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS t(v TEXT)")
	return err
}

// row returns the table's value, "" if there is none (or no table: a
// committed DeleteAll drops it under the live instance).
func row(ctx context.Context, st *core.State) (string, error) {
	if err := newRowTable(ctx, st); err != nil {
		return "", err
	}
	var v string
	err := st.Storage().QueryRow(ctx, "SELECT v FROM t").Scan(&v)
	if errors.Is(err, core.ErrNoRows) {
		return "", nil
	}
	return v, err
}

type facetFixture struct {
	parent *core.Stub[*folder]
	f1     *core.Stub[*doc]
}

// newFacetFixture makes P (a row "p-row") and its facet f1 (a row
// "f1-row" and an alarm an hour away).
func newFacetFixture(t *testing.T) *facetFixture {
	t.Helper()
	rt := openRuntime(t, core.Options{})
	ns, err := core.Register(rt, "folders", func(ctx context.Context, st *core.State) (*folder, error) {
		return &folder{st: st}, newRowTable(ctx, st)
	})
	require.NoError(t, err)
	docs, err := core.RegisterFacet(rt, ns, "docs", func(ctx context.Context, st *core.State) (*doc, error) {
		return &doc{st: st}, newRowTable(ctx, st)
	})
	require.NoError(t, err)
	f := &facetFixture{}
	f.parent, err = ns.Get("P")
	require.NoError(t, err)
	ctx := context.Background()
	f.f1, err = core.Call(ctx, f.parent, func(ctx context.Context, p *folder) (*core.Stub[*doc], error) {
		if _, err := p.st.Storage().Exec(ctx, "INSERT INTO t(v) VALUES ('p-row')"); err != nil {
			return nil, err
		}
		return docs.Get(p.st, "f1")
	})
	require.NoError(t, err)
	require.NoError(t, core.Do(ctx, f.f1, func(ctx context.Context, d *doc) error {
		if _, err := d.st.Storage().Exec(ctx, "INSERT INTO t(v) VALUES ('f1-row')"); err != nil {
			return err
		}
		return d.st.SetAlarm(ctx, d.st.Now().Add(time.Hour))
	}))
	return f
}

// state returns f1's row and whether its alarm is pending, and P's row.
func (f *facetFixture) state(t *testing.T) (f1Row string, f1Alarm bool, pRow string) {
	t.Helper()
	ctx := context.Background()
	type facetState struct {
		row   string
		alarm bool
	}
	fs, err := core.Call(ctx, f.f1, func(ctx context.Context, d *doc) (facetState, error) {
		v, err := row(ctx, d.st)
		if err != nil {
			return facetState{}, err
		}
		_, ok, err := d.st.GetAlarm(ctx)
		return facetState{v, ok}, err
	})
	require.NoError(t, err)
	pRow, err = core.Call(ctx, f.parent, func(ctx context.Context, p *folder) (string, error) { return row(ctx, p.st) })
	require.NoError(t, err)
	return fs.row, fs.alarm, pRow
}

func TestStorage_DeleteAllRollsBackFacets(t *testing.T) {
	errPlanned := errors.New("planned failure after DeleteAll")
	ctx := context.Background()
	deleteAll := func(st *core.State, ctx context.Context, fail bool) error {
		if err := st.Storage().DeleteAll(ctx); err != nil {
			return err
		}
		if fail {
			return errPlanned
		}
		return nil
	}
	tests := []struct {
		name      string
		run       func(f *facetFixture) error // the turn calling DeleteAll
		wantErr   error
		wantF1Row string
		wantAlarm bool
		wantPRow  string
	}{{
		name: "parent's turn fails",
		run: func(f *facetFixture) error {
			return core.Do(ctx, f.parent, func(ctx context.Context, p *folder) error { return deleteAll(p.st, ctx, true) })
		},
		wantErr: errPlanned, wantF1Row: "f1-row", wantAlarm: true, wantPRow: "p-row",
	}, {
		name: "facet's turn fails",
		run: func(f *facetFixture) error {
			return core.Do(ctx, f.f1, func(ctx context.Context, d *doc) error { return deleteAll(d.st, ctx, true) })
		},
		wantErr: errPlanned, wantF1Row: "f1-row", wantAlarm: true, wantPRow: "p-row",
	}, {
		name: "parent's turn commits",
		run: func(f *facetFixture) error {
			return core.Do(ctx, f.parent, func(ctx context.Context, p *folder) error { return deleteAll(p.st, ctx, false) })
		},
		wantF1Row: "", wantAlarm: false, wantPRow: "",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFacetFixture(t)
			err := tt.run(f)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			f1Row, f1Alarm, pRow := f.state(t)
			if f1Row != tt.wantF1Row {
				t.Errorf("f1's row: got %q, want %q", f1Row, tt.wantF1Row)
			}
			if f1Alarm != tt.wantAlarm {
				t.Errorf("f1's alarm pending: got %v, want %v", f1Alarm, tt.wantAlarm)
			}
			if pRow != tt.wantPRow {
				t.Errorf("P's row: got %q, want %q", pRow, tt.wantPRow)
			}
		})
	}
}
