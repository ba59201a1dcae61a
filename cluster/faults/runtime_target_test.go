package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// runtimeNode is a runtime in cluster mode over an in-memory engine, serving the registers over
// HTTP on 127.0.0.1, and a client of it.
func runtimeNode(t *testing.T, c *replogtest.MemCluster, name string) (*core.Runtime, *RuntimeClient) {
	t.Helper()
	view := c.Node()
	rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon()}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := RegisterHandler(rt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	client := &RuntimeClient{Base: srv.URL, HTTP: srv.Client(), Log: view.Log()}
	t.Cleanup(func() {
		client.Close()
		srv.Close()
		rt.Close()
	})
	return rt, client
}

// S-X6: the runtime target's register, through its HTTP handler and client: a write expecting the
// current version is acknowledged with the next one, a write expecting another is a conflict that
// writes nothing, a read returns the version and value, the records are the history of every
// write; a node that does not own the key refuses every operation (ErrRefused, not a conflict),
// until the owner hands the object back; and the epochs of the object's log, read through the
// engine, grow from one owner to the next.
func TestRuntimeTarget_Register(t *testing.T) {
	c := replogtest.NewMemCluster()
	rt1, n1 := runtimeNode(t, c, "n1")
	_, n2 := runtimeNode(t, c, "n2")
	ctx := context.Background()
	const key = "registers/k0"

	if v, err := n1.Write(ctx, key, 0, "a"); err != nil || v != 1 {
		t.Fatalf("first write: %d, %v; want 1", v, err)
	}
	_, err := n1.Write(ctx, key, 0, "b")
	if outcome(err) != Conflict {
		t.Fatalf("write expecting 0 at version 1: %v (%v); want a conflict", err, outcome(err))
	}
	if v, err := n1.Write(ctx, key, 1, "c"); err != nil || v != 2 {
		t.Fatalf("write expecting 1: %d, %v; want 2", v, err)
	}
	if v, val, err := n1.Read(ctx, key); err != nil || v != 2 || val != "c" {
		t.Fatalf("read: %d %q %v; want 2 \"c\"", v, val, err)
	}

	// Node 2: another node owns the key.
	_, err = n2.Write(ctx, key, 2, "d")
	if outcome(err) != Refused || !errors.Is(err, ErrRefused) {
		t.Fatalf("write through a node that does not own the key: %v (%v); want refused", err, outcome(err))
	}
	if _, _, err := n2.Read(ctx, key); !errors.Is(err, ErrRefused) {
		t.Fatalf("read through a node that does not own the key: %v; want refused", err)
	}
	if _, err := n2.Records(ctx, key); !errors.Is(err, ErrRefused) {
		t.Fatalf("records through a node that does not own the key: %v; want refused", err)
	}

	if err := rt1.Close(); err != nil { // hands the lease back
		t.Fatal(err)
	}
	if v, err := n2.Write(ctx, key, 2, "d"); err != nil || v != 3 {
		t.Fatalf("write through node 2 once node 1 closed: %d, %v; want 3", v, err)
	}
	recs, err := n2.Records(ctx, key)
	want := []Record{{1, "a", 0}, {2, "c", 0}, {3, "d", 0}}
	if err != nil || fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("records: %v, %v; want %v", recs, err, want)
	}

	epochs, err := n2.Epochs(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Node 1: epoch record, the new file, one commit (the conflict wrote nothing); node 2: epoch
	// record, one commit.
	if len(epochs) != 5 || epochs[0] == 0 || epochs[2] != epochs[0] || epochs[3] <= epochs[2] || epochs[4] != epochs[3] {
		t.Fatalf("epochs along the log: %v; want node 1's three records at one epoch, node 2's two at a higher one", epochs)
	}
	v := &Verdict{Key: key}
	CheckEpochs(v, epochs)
	if v.EpochDrops != 0 || v.LogRecords != 5 {
		t.Fatalf("CheckEpochs: %+v", v)
	}
}

// S-X6: bad input to the handler gets a clear error and changes nothing.
func TestRuntimeTarget_BadInput(t *testing.T) {
	_, n1 := runtimeNode(t, replogtest.NewMemCluster(), "n1")
	resp, err := n1.HTTP.Post(n1.Base+"/write?key=k0&expect=x&value=a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("expect=x: %s %s; want 400", resp.Status, b)
	}
	// An error of the runtime that is none of the refusals (here: no such object name) is unknown.
	_, err = n1.Write(context.Background(), "registers/", 0, "a")
	if err == nil || outcome(err) != Unknown {
		t.Fatalf("write to an empty name: %v (%v); want an error of unknown outcome", err, outcome(err))
	}
	if v, _, err := n1.Read(context.Background(), "registers/k0"); err != nil || v != 0 {
		t.Fatalf("read after the bad writes: %d, %v; want version 0", v, err)
	}
}

// S-X6, S-CL2..CL5: the runtime's errors mapped to the outcome a client must assume: a node that
// does not own the key, that was fenced, cannot prove its lease, or is stopping stored nothing (refused); a
// commit whose outcome is unknown, or any other error, is unknown.
func TestRuntimeTarget_Classify(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&core.NotOwnerError{Key: "registers/k0", Holder: "n2", Until: time.Now()}, "refused"},
		{fmt.Errorf("call: %w", core.ErrFenced), "refused"},
		{fmt.Errorf("call: %w", core.ErrLeaseUnproven), "refused"},
		{fmt.Errorf("call: %w", core.ErrClosed), "refused"},
		{fmt.Errorf("call: %w", core.ErrCommitUnknown), "unknown"},
		{errors.Join(core.ErrCommitUnknown, core.ErrFenced), "unknown"},
		{context.DeadlineExceeded, "unknown"},
		{errors.New("disk full"), "unknown"},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %s; want %s", c.err, got, c.want)
		}
	}
}

// S-X6: a refusal that stored nothing is left out of the linearizability check: taken for a
// conflict ("the version is not the one expected") it would make a good history illegal. One in
// the final records is caught.
func TestCheck_Refused(t *testing.T) {
	ops := []Op{
		write(0, 0, "a", 1, OK, 0, 10*ms),
		write(1, 1, "b", 0, Refused, 20*ms, 30*ms), // expected the right version, refused by a non-owner
		read(2, 1, "a", 40*ms, 41*ms),
		write(0, 1, "c", 2, OK, 50*ms, 60*ms),
	}
	final := []Record{{1, "a", 0}, {2, "c", 0}}
	v := Check("k", ops, final, time.Minute)
	if !v.OK() || v.Refused != 1 || v.Acked != 2 {
		t.Fatalf("verdict %+v; want a pass with 1 refused, 2 acked", v)
	}
	asConflict := append([]Op(nil), ops...)
	asConflict[1].Out = Conflict
	if v := Check("k", asConflict, final, time.Minute); v.Porcupine != porcupine.Illegal {
		t.Fatalf("the same refusal taken for a conflict: %v; want Illegal", v.Porcupine)
	}
	landed := []Record{{1, "a", 0}, {2, "b", 0}}
	if v := Check("k", ops[:3], landed, time.Minute); v.Phantoms == 0 {
		t.Fatalf("a refused write in the final records: %+v; want a phantom", v)
	}
}

// S-X6: epochs that drop along an object's log are caught, equal and growing ones pass.
func TestCheckEpochs(t *testing.T) {
	v := &Verdict{Key: "k"}
	CheckEpochs(v, []uint64{3, 3, 3, 7, 7, 9})
	if v.EpochDrops != 0 || len(v.Problems) != 0 {
		t.Fatalf("growing epochs: %+v", v)
	}
	CheckEpochs(v, []uint64{3, 7, 5, 9})
	if v.EpochDrops != 1 || v.LogRecords != 10 || len(v.Problems) != 1 {
		t.Fatalf("an epoch that drops: %+v; want 1 drop in 10 records", v)
	}
}

// S-X6: a node that cannot be reached (nothing listens: it is down) refuses: the request was
// never sent. One that accepts the connection and never answers is an unknown outcome.
func TestRuntimeTarget_Transport(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down := &RuntimeClient{Base: "http://" + addr, HTTP: &http.Client{}}
	defer down.Close()
	if _, err := down.Write(context.Background(), "registers/k0", 0, "a"); outcome(err) != Refused {
		t.Fatalf("write to a node that is down: %v (%v); want refused", err, outcome(err))
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	hung := &RuntimeClient{Base: "http://" + silent.Addr().String(), HTTP: &http.Client{}}
	defer hung.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := hung.Write(ctx, "registers/k0", 0, "a"); err == nil || outcome(err) != Unknown {
		t.Fatalf("write to a node that never answers: %v (%v); want unknown", err, outcome(err))
	}
	silent.Close()
	for c := range accepted {
		c.Close()
	}
}
