package loopback

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, and a server can listen on each.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 8 distinct ports", ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}

// On Linux the ports lie below the range outgoing connections take their local ports from, so
// that no connection made between the pick and a server's start (or restart) can take one.
func TestFreePorts_BelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low == 0 {
		t.Log("the system does not say which ports outgoing connections take; nothing to check")
		return
	}
	ports, err := FreePorts(16)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p < lowest || p >= low {
			t.Errorf("port %d: want one in [%d, %d)", p, lowest, low)
		}
	}
}
