// Package loopback finds ports on 127.0.0.1 for the servers that tests and benchmarks start.
package loopback

import "net"

// FreePorts returns n distinct ports on 127.0.0.1 that were free a moment ago: each was listened on,
// then closed again, for a server to take.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
