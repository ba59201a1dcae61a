package core

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// A call another node sent addresses its object as Get does: stubOf, which takes a resident
// object's id and files from it, makes the stub Get would, bound to that object.
func TestStubOf_IsGetsStub(t *testing.T) {
	rt, err := Open(Options{Dir: t.TempDir(), IdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ns, err := Register(rt, "counters", func(context.Context, *State) (*State, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, resident := range []bool{false, true} {
		name := "cold"
		if resident {
			name = "warm"
			s, err := ns.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := Do(t.Context(), s, func(context.Context, *State) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		got, err := stubOf(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ns.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if got.ns != want.ns || got.name != want.name || got.id != want.id || got.place != want.place {
			t.Errorf("resident %v: stubOf(%q) = %+v; want Get's %+v", resident, name, got, want)
		}
		if o := got.obj.Load(); (o != nil) != resident || (resident && o != ns.ns.live(name)) {
			t.Errorf("resident %v: stubOf(%q) is bound to %p; want the resident object (%p)", resident, name, o, ns.ns.live(name))
		}
	}
	if _, err := stubOf(ns, ""); err == nil {
		t.Errorf("stubOf of an empty name: nil error; want Get's")
	}
}
