package faults

import (
	"testing"
	"time"
)

// The alarm check counts an armed alarm that never ran as lost and a run before its time as
// early, and measures an owner-lost alarm's lateness against its shard's failover after the fault.
func TestCheckAlarms(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ns := func(d time.Duration) int64 { return at(d).UnixNano() }
	as := []armed{
		{Key: "alarms/kept", Shard: 0, Scheduled: at(5 * time.Second), Acked: at(time.Second), Owner: "n1"},
		{Key: "alarms/lost-owner", Shard: 1, Scheduled: at(5 * time.Second), Acked: at(time.Second), Owner: "n2"},
		{Key: "alarms/never", Shard: 0, Scheduled: at(5 * time.Second), Acked: at(time.Second), Owner: "n1"},
		{Key: "alarms/early", Shard: 0, Scheduled: at(5 * time.Second), Acked: at(time.Second), Owner: "n1"},
		{Key: "alarms/unacked", Shard: 0, Scheduled: at(5 * time.Second), Owner: ""},
	}
	fires := map[string][]Fire{
		"alarms/kept":       {{Scheduled: ns(5 * time.Second), Fired: ns(5100 * time.Millisecond), Node: "n1"}},
		"alarms/lost-owner": {{Scheduled: ns(5 * time.Second), Fired: ns(9500 * time.Millisecond), Node: "n3"}},
		"alarms/early":      {{Scheduled: ns(5 * time.Second), Fired: ns(4900 * time.Millisecond), Node: "n1"}},
	}
	// n2 is killed at 3 s; its shard 1 is served again by a ping sent at 3.2 s that returns at 9 s.
	events := []faultEvent{
		{At: at(3 * time.Second), Kind: "kill", Nodes: []string{"n2"}},
		{At: at(4 * time.Second), Kind: "stop", Nodes: []string{"n1"}},
	}
	pings := map[int][]ping{1: {
		{call: at(2 * time.Second), ret: at(2100 * time.Millisecond), node: "n2"},
		{call: at(3200 * time.Millisecond), ret: at(9 * time.Second), node: "n3"},
	}, 0: {
		// n1 owned shard 0 when armed; n3 took it over before the alarms were due, so a fault
		// of n1 afterwards does not make them owner-lost.
		{call: at(1500 * time.Millisecond), ret: at(1600 * time.Millisecond), node: "n3"},
	}}
	s := checkAlarms(as, fires, events, pings)
	if s.Armed != 4 || s.Unacked != 1 || s.Fired != 3 || s.Lost != 1 || s.Early != 1 {
		t.Errorf("got armed=%d unacked=%d fired=%d lost=%d early=%d, want 4 1 3 1 1", s.Armed, s.Unacked, s.Fired, s.Lost, s.Early)
	}
	if s.OwnerLost.N != 1 || s.OwnerLost.Max != 4500*time.Millisecond {
		t.Errorf("owner-lost lateness: got %v, want one of 4.5s", s.OwnerLost)
	}
	if s.Failover.Max != 6*time.Second || s.Excess.Max != 500*time.Millisecond {
		t.Errorf("failover %v, excess %v: want 6s and 0.5s", s.Failover, s.Excess)
	}
	if s.OwnerKept.N != 2 {
		t.Errorf("owner-kept: got %v, want two", s.OwnerKept)
	}
	if s.OK() {
		t.Errorf("OK with a lost and an early alarm: %s", s)
	}
}
