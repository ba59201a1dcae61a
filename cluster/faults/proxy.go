package faults

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Mode is what a Link lets through.
type Mode int32

const (
	// Open forwards both directions.
	Open Mode = iota
	// Cut closes the link's connections and refuses new ones.
	Cut
	// DropForward passes what the far end sends, and throws away what the near end (the side
	// that connects) sends: a one-way cut.
	DropForward
	// DropBackward passes what the near end sends and throws away what the far end sends.
	DropBackward
)

// A Link is a TCP proxy on 127.0.0.1 to one address, whose traffic the harness cuts and heals.
type Link struct {
	l    net.Listener
	to   string
	mode atomic.Int32
	drop atomic.Int64 // bytes thrown away

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewLink listens on addr (127.0.0.1:port; port 0 picks one) and forwards every connection to to.
func NewLink(addr, to string) (*Link, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	k := &Link{l: l, to: to, conns: make(map[net.Conn]struct{})}
	k.wg.Go(k.accept)
	return k, nil
}

// Addr is the address the link listens on.
func (k *Link) Addr() string { return k.l.Addr().String() }

// Set changes what the link lets through, at once for the connections it carries. Cut closes them.
func (k *Link) Set(m Mode) {
	k.mode.Store(int32(m))
	if m == Cut {
		k.mu.Lock()
		for c := range k.conns {
			c.Close()
		}
		k.mu.Unlock()
	}
}

// Dropped returns how many bytes the link has thrown away.
func (k *Link) Dropped() int64 { return k.drop.Load() }

// Mode returns what the link lets through.
func (k *Link) Mode() Mode { return Mode(k.mode.Load()) }

// Close stops the link, closes its connections and waits for its goroutines.
func (k *Link) Close() error {
	err := k.l.Close()
	k.mu.Lock()
	for c := range k.conns {
		c.Close()
	}
	k.conns = nil // and track refuses any more
	k.mu.Unlock()
	k.wg.Wait()
	return err
}

func (k *Link) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conns == nil {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *Link) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	c.Close()
}

func (k *Link) accept() {
	for {
		near, err := k.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if k.Mode() == Cut {
			near.Close()
			continue
		}
		k.wg.Go(func() { k.serve(near) })
	}
}

func (k *Link) serve(near net.Conn) {
	far, err := net.Dial("tcp", k.to)
	if err != nil {
		near.Close()
		return
	}
	if !k.track(near) || !k.track(far) {
		near.Close()
		far.Close()
		return
	}
	// A cut that came between Accept and here closes them now.
	if k.Mode() == Cut {
		k.untrack(near)
		k.untrack(far)
		return
	}
	var pipes sync.WaitGroup
	pipes.Go(func() { k.pipe(far, near, DropForward) })
	pipes.Go(func() { k.pipe(near, far, DropBackward) })
	pipes.Wait()
}

// pipe copies src to dst, throwing the bytes away while the link's mode is drop; when either
// side ends, it closes both.
func (k *Link) pipe(dst, src net.Conn, drop Mode) {
	defer k.untrack(dst)
	defer k.untrack(src)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch k.Mode() {
			case Cut:
				return
			case drop:
				k.drop.Add(int64(n))
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: the other pipe ends too
		}
	}
}

// Net is the mesh of links between n nodes: node i reaches node j's cluster port through
// Link(i, j) only, so the harness can cut any pair, in one direction or both.
type Net struct {
	n     int
	links [][]*Link // links[i][j], nil on the diagonal
}

// NewNet starts the links: ports[i][j] is where Link(i, j) listens, clusterAddr[j] where node j's
// cluster port is.
func NewNet(listen [][]string, clusterAddr []string) (*Net, error) {
	n := len(clusterAddr)
	nt := &Net{n: n, links: make([][]*Link, n)}
	for i := range n {
		nt.links[i] = make([]*Link, n)
		for j := range n {
			if i == j {
				continue
			}
			k, err := NewLink(listen[i][j], clusterAddr[j])
			if err != nil {
				nt.Close()
				return nil, err
			}
			nt.links[i][j] = k
		}
	}
	return nt, nil
}

// Routes returns node i's routes: its links to every other node.
func (nt *Net) Routes(i int) []string {
	var rs []string
	for j, k := range nt.links[i] {
		if j != i {
			rs = append(rs, "nats://"+k.Addr())
		}
	}
	return rs
}

// Block stops what node from sends to node to (both connections between them carry it: the one
// from dials and the one to dials). Heal undoes every block.
func (nt *Net) Block(from, to int) {
	nt.links[from][to].Set(DropForward)
	nt.links[to][from].Set(DropBackward)
}

// CutPair cuts both directions between nodes i and j.
func (nt *Net) CutPair(i, j int) {
	nt.links[i][j].Set(Cut)
	nt.links[j][i].Set(Cut)
}

// Isolate cuts node i from every other node.
func (nt *Net) Isolate(i int) {
	for j := range nt.n {
		if j != i {
			nt.CutPair(i, j)
		}
	}
}

// Heal opens every link.
func (nt *Net) Heal() {
	for i := range nt.n {
		for j := range nt.n {
			if i != j {
				nt.links[i][j].Set(Open)
			}
		}
	}
}

// Close closes every link.
func (nt *Net) Close() {
	for i := range nt.links {
		for _, k := range nt.links[i] {
			if k != nil {
				k.Close()
			}
		}
	}
}
