package bench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
	"github.com/gorilla/websocket"
)

// Benchmarks of the broadcast room (package patterns/room) over real
// loopback WebSockets:
//
//	go test -run '^$' -bench 'Room' -benchtime 1x ./bench   # smoke
//	go test -run '^$' -bench 'RoomFanout' ./bench
//	go test -run '^$' -bench 'RoomHibernated' -benchtime 1x ./bench
//
// BenchmarkRoomFanout: one member sends, every member (the sender
// included) receives; deliveries/s counts messages received by members
// per second, for rooms of 2, 100 and 1,000 clients in this process.
// Each message is one turn of the room (its history row is written with
// synchronous=NORMAL; FULL adds one fsync per group commit). The sender
// keeps at most roomWindow messages in flight, so no member's send queue
// overflows.
//
// BenchmarkRoomHibernated: 10,000 idle connections to 100 rooms, held by a
// child process, so that only the server is measured. B/conn is the
// server's Go heap and stacks per connection after a GC (HeapInuse +
// StackInuse growth; the kernel's socket buffers are not counted);
// resident-objects is the rooms still in memory after the idle time
// (hibernation means 0).

const roomWindow = 64 // messages in flight in BenchmarkRoomFanout

func BenchmarkRoomFanout(b *testing.B) {
	for _, n := range []int{2, 100, 1000} {
		b.Run("clients="+strconv.Itoa(n), func(b *testing.B) {
			raiseFileLimit(b, 2*n+256)
			rt := roomOpen(b, core.Options{Synchronous: "NORMAL"})
			rooms, err := room.Register(rt, "rooms", room.Options{})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(room.Handler(rooms))
			benchFanout(b, n, "ws"+strings.TrimPrefix(srv.URL, "http")+"/room/bench?name=m")
			srv.Close()
			roomClose(b, rt)
		})
	}
}

// BenchmarkRoomFanoutBaseline is BenchmarkRoomFanout's clients on a bare
// gorilla/websocket hub in this process: one reader and one writer
// goroutine per connection, a mutex-guarded member list and offset, and
// nothing stored: compare BenchmarkRoomFanout/clients=N.
func BenchmarkRoomFanoutBaseline(b *testing.B) {
	for _, n := range []int{2, 100, 1000} {
		b.Run("hub=gorilla/clients="+strconv.Itoa(n), func(b *testing.B) {
			raiseFileLimit(b, 2*n+256)
			h := &bareHub{}
			srv := httptest.NewServer(h)
			benchFanout(b, n, "ws"+strings.TrimPrefix(srv.URL, "http")+"/")
			srv.Close()
			h.wg.Wait()
		})
	}
}

// bareHub is the gorilla chat hub: every message gets the next offset and
// goes to every member's send queue, which its writer goroutine drains.
type bareHub struct {
	up      websocket.Upgrader
	mu      sync.Mutex
	members map[*bareMember]struct{}
	off     int64
	wg      sync.WaitGroup
}

type bareMember struct {
	c    *websocket.Conn
	send chan []byte
}

func (h *bareHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := h.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	m := &bareMember{c: c, send: make(chan []byte, 1024)}
	h.mu.Lock()
	if h.members == nil {
		h.members = make(map[*bareMember]struct{})
	}
	h.members[m] = struct{}{}
	h.mu.Unlock()
	m.send <- []byte("!live 0")
	h.wg.Add(1)
	go func() { // the writer
		defer h.wg.Done()
		for f := range m.send {
			if c.WriteMessage(websocket.TextMessage, f) != nil {
				break
			}
		}
		c.Close()
	}()
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			break
		}
		h.mu.Lock()
		h.off++
		f := append(strconv.AppendInt(nil, h.off, 10), ' ')
		f = append(f, data...)
		for o := range h.members {
			select {
			case o.send <- f:
			default: // a slow member is dropped, as the room drops it
			}
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	delete(h.members, m)
	h.mu.Unlock()
	close(m.send)
}

// benchFanout connects n members to url; one sends, every member (the
// sender included) receives, and deliveries/s is reported.
func benchFanout(b *testing.B, n int, url string) {
	// n members, each with a reader goroutine that records the last
	// offset it received.
	conns := make([]*websocket.Conn, n)
	last := make([]atomic.Int64, n)
	err := each(n, 16, func(i int) error {
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			return err
		}
		conns[i] = c
		return waitLive(c)
	})
	if err != nil {
		b.Fatal(err)
	}
	var readers sync.WaitGroup
	for i, c := range conns {
		readers.Go(func() { readOffsets(c, &last[i]) })
	}
	minLast := func() int64 {
		m := last[0].Load()
		for i := range last {
			m = min(m, last[i].Load())
		}
		return m
	}
	waitFor := func(off int64) {
		for minLast() < off {
			time.Sleep(20 * time.Microsecond)
		}
	}

	msg := []byte("hello, room")
	sender := conns[0]
	var sent, done int64
	start := time.Now()
	for b.Loop() {
		sent++
		if sent-roomWindow > done {
			done = minLast()
			if sent-roomWindow > done {
				waitFor(sent - roomWindow)
				done = sent - roomWindow
			}
		}
		if err := sender.WriteMessage(websocket.TextMessage, msg); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(sent)
	elapsed := time.Since(start)
	b.ReportMetric(float64(sent)*float64(n)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(sent)/elapsed.Seconds(), "messages/s")

	for _, c := range conns {
		c.Close()
	}
	readers.Wait()
}

// waitLive reads a new member's frames up to the room's "!live" notice.
func waitLive(c *websocket.Conn) error {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for {
		_, f, err := c.ReadMessage()
		if err != nil {
			return err
		}
		if strings.HasPrefix(string(f), "!live ") {
			return nil
		}
	}
}

// readOffsets reads frames until the connection closes and stores the
// offset of each message, parsed from its first bytes without allocating.
func readOffsets(c *websocket.Conn, last *atomic.Int64) {
	var buf [512]byte
	for {
		_, r, err := c.NextReader()
		if err != nil {
			return
		}
		n, _ := io.ReadFull(r, buf[:])
		if n == len(buf) {
			io.Copy(io.Discard, r)
		}
		var off int64
		i := 0
		for ; i < n && buf[i] >= '0' && buf[i] <= '9'; i++ {
			off = off*10 + int64(buf[i]-'0')
		}
		if i > 0 && i < n && buf[i] == ' ' {
			last.Store(off)
		}
	}
}

const (
	roomChildEnv   = "DURABLE_ROOM_BENCH_ADDR" // the child's server address
	roomIdleConns  = 10000
	roomIdleRooms  = 100
	roomIdleTimout = 200 * time.Millisecond
)

func BenchmarkRoomHibernated(b *testing.B) {
	raiseFileLimit(b, roomIdleConns+1024)
	for b.Loop() {
		benchRoomHibernated(b)
	}
}

func benchRoomHibernated(b *testing.B) {
	rt := roomOpen(b, core.Options{Synchronous: "NORMAL", IdleTimeout: roomIdleTimout})
	rooms, err := room.Register(rt, "rooms", room.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(room.Handler(rooms))
	defer srv.Close()
	goroutines0 := runtime.NumGoroutine()
	heap0 := goMemInUse()

	// The clients live in a child process: their memory is not ours.
	cmd := exec.Command(os.Args[0], "-test.run=^TestRoomClientsChild$")
	cmd.Env = append(os.Environ(), roomChildEnv+"="+srv.Listener.Addr().String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close() // the child closes its connections and exits
	joined := false
	for lines := bufio.NewScanner(stdout); lines.Scan(); {
		if lines.Text() == "joined" {
			joined = true
			break
		}
	}
	if !joined {
		b.Fatal("the client process did not join its rooms")
	}

	// Let every room hibernate.
	deadline := time.Now().Add(10 * time.Second)
	for rt.Stats().Resident > 0 && time.Now().Before(deadline) {
		time.Sleep(roomIdleTimout / 4)
	}
	st := rt.Stats()
	heap1 := goMemInUse()
	b.ReportMetric(float64(st.Resident), "resident-objects")
	b.ReportMetric(float64(heap1-heap0)/roomIdleConns, "B/conn")
	b.ReportMetric(float64(runtime.NumGoroutine()-goroutines0)/roomIdleConns, "goroutines/conn")

	stdin.Close()
	cmd.Wait()
	roomClose(b, rt) // waits for every connection's goroutines
}

// goMemInUse is the Go heap and stacks in use after a GC.
func goMemInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// TestRoomClientsChild is the client side of BenchmarkRoomHibernated, run
// in a child process: it opens roomIdleConns connections spread over
// roomIdleRooms rooms, says "joined", and closes them when its standard
// input closes.
func TestRoomClientsChild(t *testing.T) {
	addr := os.Getenv(roomChildEnv)
	if addr == "" {
		return // only runs as the child
	}
	raiseFileLimit(t, roomIdleConns+256)
	conns := make([]*websocket.Conn, roomIdleConns)
	err := each(roomIdleConns, 32, func(i int) error {
		url := fmt.Sprintf("ws://%s/room/r%d?name=m%d", addr, i%roomIdleRooms, i)
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			return err
		}
		conns[i] = c
		return waitLive(c)
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("joined")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// raiseFileLimit makes sure the process may open n files.
func raiseFileLimit(tb testing.TB, n int) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatal(err)
	}
	if l.Cur >= uint64(n) {
		return
	}
	l.Cur = max(l.Cur, uint64(n))
	l.Max = max(l.Max, l.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatalf("need %d open files (RLIMIT_NOFILE %d): %v", n, l.Cur, err)
	}
}

func roomOpen(b *testing.B, opts core.Options) *core.Runtime {
	b.Helper()
	rt, err := core.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return rt
}

func roomClose(b *testing.B, rt *core.Runtime) {
	b.Helper()
	if err := rt.Close(); err != nil {
		b.Error(err)
	}
}
