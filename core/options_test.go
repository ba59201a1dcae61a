package core

import "testing"

// S-CL6: object databases are at synchronous FULL in the single-process runtime and NORMAL in
// cluster mode, where the log makes a commit durable, unless Options.Synchronous says otherwise.
func TestOptions_SynchronousDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"single-process", Options{}, "FULL"},
		{"cluster mode", Options{Replication: &Replication{}}, "NORMAL"},
		{"cluster mode, FULL asked for", Options{Replication: &Replication{}, Synchronous: "FULL"}, "FULL"},
		{"single-process, NORMAL asked for", Options{Synchronous: "NORMAL"}, "NORMAL"},
	} {
		o := tc.opts
		if err := o.withDefaults(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := o.Synchronous; got != tc.want {
			t.Errorf("%s: Synchronous = %q; want %q", tc.name, got, tc.want)
		}
	}
	o := Options{Synchronous: "OFF"}
	if err := o.withDefaults(); err == nil {
		t.Errorf("Synchronous OFF: no error")
	}
}
