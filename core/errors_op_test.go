package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// Every error from Call, TriggerAlarm and Rearm is an *Error, naming the namespace and object when there is one.
func TestError_CallTriggerAlarmRearmReturnError(t *testing.T) {
	ctx := context.Background()
	type opened struct {
		rt   *core.Runtime
		stub *core.Stub[*peer]
	}
	open := func(t *testing.T, closed bool) opened {
		rt, err := core.Open(core.Options{})
		require.NoError(t, err)
		o := opened{rt: rt, stub: peers(t, rt, new(int), "p1")[0]}
		if closed {
			require.NoError(t, rt.Close())
		} else {
			t.Cleanup(func() { rt.Close() })
		}
		return o
	}
	tests := []struct {
		name    string
		closed  bool // the runtime is closed first
		op      func(o opened) error
		wantIs  error // a cause errors.Is must find, if set
		wantObj bool  // the *Error names peers/p1
	}{{
		name:   "Call on a closed runtime",
		closed: true,
		op: func(o opened) error {
			return core.Do(ctx, o.stub, func(context.Context, *peer) error { return nil })
		},
		wantIs: core.ErrClosed, wantObj: true,
	}, {
		name:   "TriggerAlarm on a closed runtime",
		closed: true,
		op: func(o opened) error {
			_, err := o.stub.TriggerAlarm(ctx)
			return err
		},
		wantIs: core.ErrClosed, wantObj: true,
	}, {
		name: "Rearm of an unknown dead letter",
		op:   func(o opened) error { return o.rt.Admin().Rearm(ctx, 12345, time.Now()) },
	}, {
		name:   "Rearm on a closed runtime",
		closed: true,
		op:     func(o opened) error { return o.rt.Admin().Rearm(ctx, 1, time.Now()) },
		wantIs: core.ErrClosed,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op(open(t, tt.closed))
			var e *core.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want a *core.Error", err, err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("got %v, want one for which errors.Is(err, %v)", err, tt.wantIs)
			}
			if tt.wantObj && (e.Namespace != "peers" || e.Name != "p1") {
				t.Errorf("the *core.Error names %s/%q, want peers/\"p1\"", e.Namespace, e.Name)
			}
			if e.Op == "" {
				t.Errorf("the *core.Error has no Op: %v", err)
			}
		})
	}
}
