package core_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest" // the relay tests
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// account is the object of the routing tests: a balance in storage, and the node it ran on.
type account struct {
	st   *core.State
	node string
	runs *atomic.Int64 // the node's runs of add
}

func (a *account) balance(ctx context.Context) (int, error) {
	v, ok, err := a.st.Storage().Get(ctx, "balance")
	if err != nil || !ok {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

// Fetch serves GET (the balance and the node) and POST (adds the body's number).
func (a *account) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			http.Error(w, "not a number", http.StatusBadRequest)
			return nil
		}
		a.runs.Add(1)
		bal, err := a.balance(ctx)
		if err != nil {
			return err
		}
		if err := a.st.Storage().Put(ctx, "balance", []byte(strconv.Itoa(bal+n))); err != nil {
			return err
		}
	}
	bal, err := a.balance(ctx)
	if err != nil {
		return err
	}
	w.Header().Set("X-Node", a.node)
	w.WriteHeader(http.StatusOK)
	if big, _ := strconv.Atoi(r.URL.Query().Get("pad")); big > 0 {
		w.Write([]byte(strings.Repeat(" ", big)))
	}
	fmt.Fprintf(w, "%d", bal)
	return nil
}

// routed is a node of a routing test: its runtime, its view of the engine, and the methods.
type routed struct {
	rt    *core.Runtime
	view  *replogtest.MemNode
	calls *recordingCalls
	ns    *core.Namespace[*account]
	runs  atomic.Int64
	add   func(context.Context, *core.Stub[*account], int) (int, error)
	get   func(context.Context, *core.Stub[*account], struct{}) (int, error)
	fail  func(context.Context, *core.Stub[*account], string) (int, error)
	block func(context.Context, *core.Stub[*account], struct{}) (int, error)
	ping  func(context.Context, *core.Stub[*account], pingArg) (int, error) // A -> B -> A
	gate  chan struct{}                                                     // block's turns wait for it

	blocked error // what ping's call inside BlockConcurrencyWhile returned
}

type pingArg struct {
	Path    []string // the objects the call goes through, each calling the next; the last answers
	Blocked bool     // the first calls the next inside BlockConcurrencyWhile
	Closure bool     // the last hop is a core.Call (local), not a method
}

// recordingCalls records the requests a node sends: to whom, and their ids.
type recordingCalls struct {
	replog.Calls
	mu    sync.Mutex
	sent  []string        // "node id"
	after func(err error) // if set, told each Send's error
}

func (r *recordingCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	// The request id is the call's first field, after its version byte: its length (one byte, for
	// the 32 hex digits of an id) and its bytes.
	var id []byte
	if len(req) > 2 && len(req) >= 2+int(req[1]) {
		id = req[2 : 2+int(req[1])]
	}
	r.mu.Lock()
	r.sent = append(r.sent, node+" "+string(id))
	r.mu.Unlock()
	reply, err := r.Calls.Send(ctx, node, req)
	if r.after != nil {
		r.after(err)
	}
	return reply, err
}

func (r *recordingCalls) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sent...)
}

func openRouted(t *testing.T, c *replogtest.MemCluster, name string, edit ...func(*core.Options)) *routed {
	t.Helper()
	n := &routed{view: c.Node(), gate: make(chan struct{})}
	n.calls = &recordingCalls{Calls: n.view.Calls()}
	opts := core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: n.view.Log(), Leases: n.view.Leases(), Beacon: n.view.Beacon(),
			Calls: n.calls, LeaseTTL: clusterTTL}}
	for _, e := range edit {
		e(&opts)
	}
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	n.rt = rt
	n.ns, err = core.Register(rt, "acct", func(_ context.Context, st *core.State) (*account, error) {
		return &account{st: st, node: name, runs: &n.runs}, nil
	})
	require.NoError(t, err)
	n.add, err = core.Define(n.ns, "add", func(ctx context.Context, a *account, by int) (int, error) {
		a.runs.Add(1)
		bal, err := a.balance(ctx)
		if err != nil {
			return 0, err
		}
		return bal + by, a.st.Storage().Put(ctx, "balance", []byte(strconv.Itoa(bal+by)))
	})
	require.NoError(t, err)
	n.get, err = core.Define(n.ns, "get", func(ctx context.Context, a *account, _ struct{}) (int, error) {
		return a.balance(ctx)
	})
	require.NoError(t, err)
	n.fail, err = core.Define(n.ns, "fail", func(ctx context.Context, a *account, msg string) (int, error) {
		return 0, errors.New(msg)
	})
	require.NoError(t, err)
	n.block, err = core.Define(n.ns, "block", func(ctx context.Context, a *account, _ struct{}) (int, error) {
		a.runs.Add(1)
		<-n.gate
		return 0, a.st.Storage().Put(ctx, "blocked", []byte("1"))
	})
	require.NoError(t, err)
	n.ping, err = core.Define(n.ns, "ping", func(ctx context.Context, a *account, arg pingArg) (int, error) {
		if len(arg.Path) == 0 {
			return a.balance(ctx)
		}
		next, err := n.ns.Get(arg.Path[0])
		if err != nil {
			return 0, err
		}
		rest := pingArg{Path: arg.Path[1:], Closure: arg.Closure}
		hop := func(ctx context.Context) (int, error) {
			if len(rest.Path) == 0 && arg.Closure { // the last hop by core.Call: it must be local
				return core.Call(ctx, next, func(ctx context.Context, b *account) (int, error) { return b.balance(ctx) })
			}
			return n.ping(ctx, next, rest)
		}
		if !arg.Blocked {
			return hop(ctx)
		}
		var r int
		err = a.st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
			r, err = hop(ctx)
			n.blocked = err
			return err
		})
		return r, err
	})
	require.NoError(t, err)
	return n
}

func (n *routed) stub(t *testing.T, name string) *core.Stub[*account] {
	t.Helper()
	s, err := n.ns.Get(name)
	require.NoError(t, err)
	return s
}

// otherShard returns a name of namespace acct whose shard differs from name's.
func otherShard(c *replogtest.MemCluster, name string) string {
	for i := 0; ; i++ {
		o := "o" + strconv.Itoa(i)
		if c.ShardOf("acct/"+o) != c.ShardOf("acct/"+name) {
			return o
		}
	}
}

// S-CL13: a method is callable on any node: called at nodes that do not own the object, it runs
// on the node that does, once per call, and its result comes back.
func TestMethodCallFromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2, n3 := openRouted(t, c, "n1"), openRouted(t, c, "n2"), openRouted(t, c, "n3")
		got, err := n1.add(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		require.Equal(t, 1, got)
		got, err = n2.add(context.Background(), n2.stub(t, "x"), 10)
		require.NoError(t, err)
		require.Equal(t, 11, got)
		got, err = n3.add(context.Background(), n3.stub(t, "x"), 100)
		require.NoError(t, err)
		require.Equal(t, 111, got)
		require.Equal(t, int64(3), n1.runs.Load(), "every call ran on the owner")
		require.Zero(t, n2.runs.Load()+n3.runs.Load())
		require.Zero(t, n2.rt.Stats().Cluster.HeldLeases+n3.rt.Stats().Cluster.HeldLeases, "no other node took the shard")
		got, err = n3.get(context.Background(), n3.stub(t, "x"), struct{}{})
		require.NoError(t, err)
		require.Equal(t, 111, got)

		// core.Call's closure stays local: at a node that does not own the object it fails,
		// naming the owner.
		_, err = core.Call(context.Background(), n2.stub(t, "x"), func(ctx context.Context, a *account) (int, error) {
			return a.balance(ctx)
		})
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe)
		require.Equal(t, "n1", noe.Holder)
	})
}

// S-CL13: without Replication.Calls, a method runs here or is refused naming the owner, as Call is;
// in one process it runs here, always.
func TestMethodCallWithoutCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openRouted(t, c, "n1")
		n2 := openRouted(t, c, "n2", func(o *core.Options) { o.Replication.Calls = nil })
		_, err := n1.add(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		_, err = n2.add(context.Background(), n2.stub(t, "x"), 1)
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe)
		require.Equal(t, "n1", noe.Holder)

		one := openRouted(t, c, "solo", func(o *core.Options) { o.Replication = nil })
		got, err := one.add(context.Background(), one.stub(t, "x"), 5)
		require.NoError(t, err)
		require.Equal(t, 5, got)
	})
}

// S-CL14: a request whose reply was lost is sent again with the same id, and the owner answers it
// with the first run's reply: the method ran once.
func TestMethodCallReplyLostNotRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		_, err := n1.add(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n1.view.LoseReplies(1)
		got, err := n2.add(context.Background(), n2.stub(t, "x"), 10)
		require.NoError(t, err)
		require.Equal(t, 11, got)
		require.Equal(t, int64(2), n1.runs.Load(), "the request sent again did not run again")
		sent := n2.calls.log()
		require.Len(t, sent, 2)
		require.Equal(t, sent[0], sent[1], "sent again to the same node with the same id")
		bal, err := n1.get(context.Background(), n1.stub(t, "x"), struct{}{})
		require.NoError(t, err)
		require.Equal(t, 11, bal)
	})
}

// S-CL14: a call sent to a node that did not answer may have run there: it is sent again to that node
// alone, and when that node cannot be reached any more the call fails with ErrCommitUnknown, not
// retryable, rather than ErrUnreachable, which would invite running it a second time.
func TestMethodCallNoReplyThenUnreachableIsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		_, err := n1.add(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n1.view.LoseReplies(1)
		n2.calls.after = func(err error) {
			if errors.Is(err, replog.ErrNoReply) {
				n1.view.CutCalls(true) // it ran the call, then could not be reached
			}
		}
		_, err = n2.add(context.Background(), n2.stub(t, "x"), 10)
		require.ErrorIs(t, err, core.ErrCommitUnknown)
		require.NotErrorIs(t, err, core.ErrUnreachable)
		require.False(t, core.IsRetryable(err))
		require.Equal(t, int64(2), n1.runs.Load(), "it ran once, at n1")
		for _, s := range n2.calls.log() {
			require.True(t, strings.HasPrefix(s, "n1 "), "sent to n1 only: %v", n2.calls.log())
		}
	})
}

// S-CL14: a node whose table is stale sends a call to a node that no longer owns the object; that
// node answers "moved" at once, naming the owner, and the caller sends it there with the same id.
// The method runs once, at the owner.
func TestMethodCallFollowsMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var frozen time.Time
		n1 := openRouted(t, c, "n1", func(o *core.Options) { o.IdleTimeout = time.Second })
		n2 := openRouted(t, c, "n2")
		n3 := openRouted(t, c, "n3", func(o *core.Options) {
			frozen = time.Now()
			o.Now = func() time.Time { return frozen } // its table never ages
		})
		_, err := n1.add(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n3.view.CutBeacon(true) // it hears no more: node 1 stays the owner in its table
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Zero(t, n1.rt.Stats().Cluster.HeldLeases, "idle: evicted, its lease handed back")
		_, err = n2.add(context.Background(), n2.stub(t, "x"), 10) // node 2 takes the shard
		require.NoError(t, err)
		require.Equal(t, int64(1), n2.runs.Load())

		got, err := n3.add(context.Background(), n3.stub(t, "x"), 100)
		require.NoError(t, err)
		require.Equal(t, 111, got)
		require.Equal(t, int64(2), n2.runs.Load(), "run once, at the owner")
		require.Equal(t, int64(1), n1.runs.Load(), "not at the node that answered moved")
		sent := n3.calls.log()
		require.Len(t, sent, 2)
		require.True(t, strings.HasPrefix(sent[0], "n1 "), "first to the owner in its table: %v", sent)
		require.True(t, strings.HasPrefix(sent[1], "n2 "), "then to the owner named: %v", sent)
		require.Equal(t, sent[0][3:], sent[1][3:], "with the same request id")
	})
}

// S-CL15: error classes survive the hop: an object's own error is a *RemoteError carrying its
// message; a full queue is ErrOverloaded and an unknown commit ErrCommitUnknown, and neither is
// sent again.
func TestMethodCallErrorsAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openRouted(t, c, "n1", func(o *core.Options) { o.MaxQueue = 1 })
		n2 := openRouted(t, c, "n2")
		ctx := context.Background()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)

		_, err = n2.fail(ctx, n2.stub(t, "x"), "insufficient funds")
		var re *core.RemoteError
		require.ErrorAs(t, err, &re)
		require.Contains(t, re.Error(), "insufficient funds")
		require.Contains(t, err.Error(), `"n1"`, "the error says which node ran it")
		require.False(t, core.IsRetryable(err))

		// A full queue: one turn runs (blocked), one waits; the third is refused.
		done := make(chan error, 2)
		for range 2 {
			go func() { _, err := n1.block(ctx, n1.stub(t, "x"), struct{}{}); done <- err }()
		}
		synctest.Wait()
		before := len(n2.calls.log())
		_, err = n2.add(ctx, n2.stub(t, "x"), 10)
		require.ErrorIs(t, err, core.ErrOverloaded)
		require.True(t, core.IsRetryable(err))
		require.Len(t, n2.calls.log(), before+1, "overloaded is not sent again")
		close(n1.gate)
		require.NoError(t, <-done)
		require.NoError(t, <-done)

		// An append whose outcome is lost: the turn ran, and may be durable; not sent again.
		runs := n1.runs.Load()
		n1.view.DropAppends(100)
		_, err = n2.add(ctx, n2.stub(t, "x"), 100)
		require.ErrorIs(t, err, core.ErrCommitUnknown)
		require.False(t, core.IsRetryable(err))
		require.Equal(t, runs+1, n1.runs.Load(), "run once, not again")
		n1.view.DropAppends(0)

		// A method the owner does not know.
		ns3, err := core.Register(n2.rt, "other", func(_ context.Context, st *core.State) (*account, error) { return &account{st: st}, nil })
		require.NoError(t, err)
		m, err := core.Define(ns3, "only_here", func(ctx context.Context, a *account, _ int) (int, error) { return 0, nil })
		require.NoError(t, err)
		ns1, err := core.Register(n1.rt, "other", func(_ context.Context, st *core.State) (*account, error) { return &account{st: st}, nil })
		require.NoError(t, err)
		y1, err := ns1.Get("y")
		require.NoError(t, err)
		s1, err := ns3.Get("y")
		require.NoError(t, err)
		// Node 1 takes y's shard first, then node 2 calls a method node 1 has not defined.
		_, err = core.Call(ctx, y1, func(ctx context.Context, a *account) (int, error) { return 0, nil })
		require.NoError(t, err)
		_, err = m(ctx, s1, 1)
		require.ErrorIs(t, err, core.ErrNoMethod)
	})
}

// S-CL16: A -> B -> A across nodes completes (the caller's gate is open while it waits); with the
// gate kept closed (BlockConcurrencyWhile) the call back fails at once with ErrDeadlock, never hangs.
func TestMethodCallABAAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		ctx := context.Background()
		y := otherShard(c, "x")
		_, err := n1.add(ctx, n1.stub(t, "x"), 7) // x at node 1
		require.NoError(t, err)
		_, err = n2.add(ctx, n2.stub(t, y), 1) // y at node 2
		require.NoError(t, err)

		got, err := n2.ping(ctx, n2.stub(t, "x"), pingArg{Path: []string{y, "x"}}) // n2 -> x@n1 -> y@n2 -> x@n1
		require.NoError(t, err)
		require.Equal(t, 7, got)

		start := time.Now()
		_, err = n2.ping(ctx, n2.stub(t, "x"), pingArg{Path: []string{y, "x"}, Blocked: true})
		require.ErrorIs(t, err, core.ErrObjectReset, "x's BlockConcurrencyWhile failed, as on one node")
		require.ErrorIs(t, n1.blocked, core.ErrDeadlock, "because y's call back to x was refused")
		var re *core.RemoteError
		require.ErrorAs(t, n1.blocked, &re, "from y's code, at node 2")
		require.Less(t, time.Since(start), time.Second, "at once")

		// x@n1 (gate closed) -> y@n2 -> z@n1 -> core.Call(x) at n1: refused at once too.
		z := otherShard(c, y)
		_, err = n1.add(ctx, n1.stub(t, z), 1) // z at node 1
		require.NoError(t, err)
		n1.blocked = nil
		start = time.Now()
		_, err = n2.ping(ctx, n2.stub(t, "x"), pingArg{Path: []string{y, z, "x"}, Blocked: true, Closure: true})
		require.ErrorIs(t, err, core.ErrObjectReset)
		require.ErrorIs(t, n1.blocked, core.ErrDeadlock, "z's core.Call back to x was refused")
		require.Less(t, time.Since(start), time.Second, "at once")
	})
}

// S-CL14: a node cut off from the owner: the call fails with ErrUnreachable, retryable, after
// Replication.CallAttempts, bounded in time; joined back, it goes through.
func TestMethodCallCutLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		ctx := context.Background()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n1.view.CutCalls(true)
		start := time.Now()
		_, err = n2.add(ctx, n2.stub(t, "x"), 1)
		require.ErrorIs(t, err, core.ErrUnreachable)
		require.True(t, core.IsRetryable(err))
		require.Contains(t, err.Error(), `"n1"`)
		require.Less(t, time.Since(start), clusterTTL, "bounded")
		require.Equal(t, int64(1), n1.runs.Load())
		n1.view.CutCalls(false)
		got, err := n2.add(ctx, n2.stub(t, "x"), 1)
		require.NoError(t, err)
		require.Equal(t, 2, got)
	})
}

// S-CL17: Stub.ServeHTTP at a node that does not own the object relays the request to the owner and
// writes its response; a body over Replication.MaxRelayBody is 413 and is not sent; a WebSocket
// upgrade is relayed too (an object that does not accept it answers it); with NoHTTPRelay, 421 as
// without Calls.
func TestServeHTTPRelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openRouted(t, c, "n1")
		n2 := openRouted(t, c, "n2", func(o *core.Options) { o.Replication.MaxRelayBody = 8 })
		n3 := openRouted(t, c, "n3", func(o *core.Options) { o.Replication.NoHTTPRelay = true })
		serve := func(n *routed, r *http.Request) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			n.stub(t, "x").ServeHTTP(w, r)
			return w
		}
		w := serve(n1, httptest.NewRequest(http.MethodPost, "/acct/x", strings.NewReader("5")))
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "n1", w.Header().Get("X-Node"))

		w = serve(n2, httptest.NewRequest(http.MethodPost, "/acct/x?via=n2", strings.NewReader("10")))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, "15", w.Body.String())
		require.Equal(t, "n1", w.Header().Get("X-Node"), "served by the owner")
		require.Equal(t, int64(2), n1.runs.Load())

		w = serve(n2, httptest.NewRequest(http.MethodPost, "/acct/x", strings.NewReader("123456789")))
		require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		require.Equal(t, int64(2), n1.runs.Load(), "not sent")

		up := httptest.NewRequest(http.MethodGet, "/acct/x", nil)
		up.Header.Set("Connection", "Upgrade")
		up.Header.Set("Upgrade", "websocket")
		up.Header.Set("Sec-WebSocket-Version", "13")
		up.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		w = serve(n2, up)
		require.Equal(t, http.StatusOK, w.Code, "answered by the owner, which does not accept it")
		require.Equal(t, "n1", w.Header().Get("X-Node"))

		w = serve(n3, httptest.NewRequest(http.MethodGet, "/acct/x", nil))
		require.Equal(t, http.StatusMisdirectedRequest, w.Code, "relaying off")

		n1.view.CutCalls(true)
		w = serve(n2, httptest.NewRequest(http.MethodGet, "/acct/x", nil))
		require.Equal(t, http.StatusServiceUnavailable, w.Code, "owner unreachable")
		require.Equal(t, "1", w.Header().Get("Retry-After"))
	})
}

// S-CL14: a request sent again while the first is still running (its attempt timed out) joins it:
// the owner runs it once and both get its reply.
func TestMethodCallSentAgainWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openRouted(t, c, "n1")
		n2 := openRouted(t, c, "n2", func(o *core.Options) { o.Replication.CallTimeout = time.Second })
		ctx := context.Background()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)
		runs := n1.runs.Load()
		done := make(chan error, 1)
		go func() { _, err := n2.block(ctx, n2.stub(t, "x"), struct{}{}); done <- err }()
		time.Sleep(2 * time.Second) // the first attempt timed out, the second is under way
		sent := n2.calls.log()
		require.Len(t, sent, 2, "sent again")
		require.Equal(t, sent[0], sent[1], "with the same id")
		close(n1.gate)
		require.NoError(t, <-done)
		require.Equal(t, runs+1, n1.runs.Load(), "run once")
	})
}

// S-CL14: a call fenced at the node that ran it (another node took the object over meanwhile: its
// commit was refused, nothing of it acknowledged) is sent again, with the same id, to the new
// owner, which runs it.
func TestMethodCallFollowsFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		frozen := time.Now()
		n1 := openRouted(t, c, "n1", func(o *core.Options) { o.Now = func() time.Time { return frozen } })
		n2, n3 := openRouted(t, c, "n2"), openRouted(t, c, "n3")
		close(n2.gate)
		close(n3.gate)
		ctx := context.Background()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := n3.block(ctx, n3.stub(t, "x"), struct{}{}); done <- err }()
		synctest.Wait()         // running at node 1
		n1.view.CutLeases(true) // node 1 pauses: no renewals, no beats; its clock says its lease holds
		n1.view.CutBeacon(true)
		time.Sleep(clusterTTL)
		got, err := n2.add(ctx, n2.stub(t, "x"), 10) // node 2 takes the object over
		require.NoError(t, err)
		require.Equal(t, 11, got)

		close(n1.gate) // node 1 resumes: its commit is fenced
		require.NoError(t, <-done)
		require.Equal(t, int64(2), n1.runs.Load(), "node 1 ran add, and the call once: fenced")
		require.Equal(t, int64(2), n2.runs.Load(), "node 2 ran add, then the call sent again")
		sent := n3.calls.log()
		// Sent to n1, again to n1 once it fell silent (the same call, joined), then to n2.
		require.Len(t, sent, 3)
		require.True(t, strings.HasPrefix(sent[0], "n1 ") && sent[1] == sent[0] && strings.HasPrefix(sent[2], "n2 "), "%v", sent)
		require.Equal(t, sent[0][3:], sent[2][3:], "with the same id")
	})
}

// S-CL11, S-CL13: the call settings are checked at Open, and a method name must be an identifier,
// defined once per namespace.
func TestMethodSettingsChecked(t *testing.T) {
	c := replogtest.NewMemCluster()
	v := c.Node()
	_, err := core.Open(core.Options{Replication: &core.Replication{Node: "n1", Log: v.Log(), Leases: v.Leases(),
		Beacon: v.Beacon(), Calls: v.Calls(), CallAttempts: -1}})
	require.ErrorContains(t, err, "must not be negative")
	synctest.Test(t, func(t *testing.T) {
		n := openRouted(t, c, "n1")
		_, err := core.Define(n.ns, "add", func(ctx context.Context, a *account, by int) (int, error) { return 0, nil })
		require.ErrorContains(t, err, "defined already")
		_, err = core.Define(n.ns, "no spaces", func(ctx context.Context, a *account, by int) (int, error) { return 0, nil })
		require.ErrorIs(t, err, core.ErrInvalidName)
	})
}

// S-CL17: a response too large for the nodes' calls is answered 502 at the relaying node, never
// cut; one that fits is relayed whole.
func TestServeHTTPRelayedResponseTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster().WithMaxCallBytes(64 << 10)
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		w := httptest.NewRecorder()
		n1.stub(t, "x").ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("1")))
		require.Equal(t, http.StatusOK, w.Code)
		w = httptest.NewRecorder()
		n2.stub(t, "x").ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?pad=10000", nil))
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, 10001, w.Body.Len())
		w = httptest.NewRecorder()
		n2.stub(t, "x").ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?pad=100000", nil))
		require.Equal(t, http.StatusBadGateway, w.Code)
	})
}

// S-CL14: a node that stops beating while a call sent to it runs there is asked again at once, with
// the same id, rather than at the attempt's timeout: killed (gone from the calls too), it cannot
// be reached, and the call fails with ErrCommitUnknown (it may have run there) within a few beats.
func TestMethodCallOwnerSilentIsUnknownAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, n2 := openRouted(t, c, "n1"), openRouted(t, c, "n2")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := n1.add(ctx, n1.stub(t, "x"), 1)
		require.NoError(t, err)
		runs := n1.runs.Load()
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := n2.block(ctx, n2.stub(t, "x"), struct{}{}); done <- err }()
		time.Sleep(clusterTTL / 8)
		synctest.Wait()
		require.Equal(t, runs+1, n1.runs.Load(), "running at n1")
		n1.view.CutBeacon(true) // n1 dies with the call running: silent, and unreachable
		n1.view.CutCalls(true)
		err = <-done
		require.ErrorIs(t, err, core.ErrCommitUnknown)
		require.False(t, core.IsRetryable(err))
		require.Less(t, time.Since(start), 2*clusterTTL, "given up once n1 is silent, not at CallTimeout (10 s)")
		sent := n2.calls.log()
		require.Len(t, sent, 2, "asked again once n1 was silent")
		require.Equal(t, sent[0], sent[1], "with the same id, to n1")
		close(n1.gate)
	})
}
