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
	add   *core.Method[*account, int, int]
	get   *core.Method[*account, struct{}, int]
	fail  *core.Method[*account, string, int]
	block *core.Method[*account, struct{}, int]
	ping  *core.Method[*account, pingArg, int] // A -> B -> A
	gate  chan struct{}                        // block's turns wait for it
}

type pingArg struct {
	Via     string // the object ping calls, which calls back get on this one
	Blocked bool   // call it inside BlockConcurrencyWhile
	Back    bool   // the way back: get on Via
}

// recordingCalls records the requests a node sends: to whom, and their ids.
type recordingCalls struct {
	replog.Calls
	mu   sync.Mutex
	sent []string // "node id"
}

func (r *recordingCalls) Send(ctx context.Context, node string, req []byte) ([]byte, error) {
	id := req[strings.Index(string(req), `"id":"`)+6:]
	id = id[:strings.IndexByte(string(id), '"')]
	r.mu.Lock()
	r.sent = append(r.sent, node+" "+string(id))
	r.mu.Unlock()
	return r.Calls.Send(ctx, node, req)
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
		<-n.gate
		return 0, nil
	})
	require.NoError(t, err)
	n.ping, err = core.Define(n.ns, "ping", func(ctx context.Context, a *account, arg pingArg) (int, error) {
		via, err := n.ns.Get(arg.Via)
		if err != nil {
			return 0, err
		}
		if arg.Back {
			return n.get.Call(ctx, via, struct{}{})
		}
		if !arg.Blocked {
			return n.ping.Call(ctx, via, pingArg{Via: a.st.Name(), Back: true})
		}
		var r int
		err = a.st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
			r, err = n.ping.Call(ctx, via, pingArg{Via: a.st.Name(), Back: true})
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
		got, err := n1.add.Call(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		require.Equal(t, 1, got)
		got, err = n2.add.Call(context.Background(), n2.stub(t, "x"), 10)
		require.NoError(t, err)
		require.Equal(t, 11, got)
		got, err = n3.add.Call(context.Background(), n3.stub(t, "x"), 100)
		require.NoError(t, err)
		require.Equal(t, 111, got)
		require.Equal(t, int64(3), n1.runs.Load(), "every call ran on the owner")
		require.Zero(t, n2.runs.Load()+n3.runs.Load())
		require.Zero(t, n2.rt.Stats().Cluster.HeldLeases+n3.rt.Stats().Cluster.HeldLeases, "no other node took the shard")
		got, err = n3.get.Call(context.Background(), n3.stub(t, "x"), struct{}{})
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
		_, err := n1.add.Call(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		_, err = n2.add.Call(context.Background(), n2.stub(t, "x"), 1)
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe)
		require.Equal(t, "n1", noe.Holder)

		one := openRouted(t, c, "solo", func(o *core.Options) { o.Replication = nil })
		got, err := one.add.Call(context.Background(), one.stub(t, "x"), 5)
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
		_, err := n1.add.Call(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n1.view.LoseReplies(1)
		got, err := n2.add.Call(context.Background(), n2.stub(t, "x"), 10)
		require.NoError(t, err)
		require.Equal(t, 11, got)
		require.Equal(t, int64(2), n1.runs.Load(), "the request sent again did not run again")
		sent := n2.calls.log()
		require.Len(t, sent, 2)
		require.Equal(t, sent[0], sent[1], "sent again to the same node with the same id")
		bal, err := n1.get.Call(context.Background(), n1.stub(t, "x"), struct{}{})
		require.NoError(t, err)
		require.Equal(t, 11, bal)
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
		_, err := n1.add.Call(context.Background(), n1.stub(t, "x"), 1)
		require.NoError(t, err)
		n3.view.CutBeacon(true) // it hears no more: node 1 stays the owner in its table
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Zero(t, n1.rt.Stats().Cluster.HeldLeases, "idle: evicted, its lease handed back")
		_, err = n2.add.Call(context.Background(), n2.stub(t, "x"), 10) // node 2 takes the shard
		require.NoError(t, err)
		require.Equal(t, int64(1), n2.runs.Load())

		got, err := n3.add.Call(context.Background(), n3.stub(t, "x"), 100)
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

var _ = httptest.NewRecorder
