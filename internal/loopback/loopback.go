// Package loopback finds ports on 127.0.0.1 for the servers that tests and benchmarks start.
package loopback

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked: ports below it are left to the services a machine runs.
const lowest = 10000

// FreePorts returns n distinct ports on 127.0.0.1 that were free a moment ago: each was listened on,
// then closed again, for a server to take.
//
// Where the system says which ports it gives outgoing connections (Linux's ephemeral range), the
// ports are picked below that range: a port picked there could be taken as the local port of any
// connection made between the pick and the server's start, or its restart on the same port.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	high := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if high-lowest >= 1000 && tries < 100*n {
			addr = "127.0.0.1:" + strconv.Itoa(lowest+rand.IntN(high-lowest))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: pick another
			}
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the range the system picks outgoing connections' local ports
// from, or 0 where it does not say.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}
