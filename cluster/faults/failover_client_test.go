package faults

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/replog/replogtest"
)

// S-X9: the failover client sends an operation refused by a node that does not own the key to the
// node the refusal names, at once, not round the others; and keeps going to that node after.
func TestRouter_FollowsTheNamedOwner(t *testing.T) {
	c := replogtest.NewMemCluster()
	_, n1 := runtimeNode(t, c, "n1")
	_, n2 := runtimeNode(t, c, "n2")
	_, n3 := runtimeNode(t, c, "n3")
	ctx := context.Background()
	const key = "registers/k0"
	if _, err := n1.Write(ctx, key, 0, "a"); err != nil { // n1 owns the key
		t.Fatal(err)
	}
	r := newRouter([]string{"n1", "n2", "n3"}, []*RuntimeClient{n1, n2, n3}, time.Second, time.Hour)
	r.guess[key] = 1
	w := &writer{r: r, key: key, budget: 10 * time.Second, version: 1, acked: 1}
	res := w.write(ctx)
	if !res.ok || res.version != 2 || res.node != 0 {
		t.Fatalf("write through n2: %+v (%v); want acknowledged by n1 as version 2", res, res.err)
	}
	if res.stats.attempts != 2 || res.stats.redirects != 1 {
		t.Fatalf("write through n2: %d attempts, %d redirects; want 2 and 1 (n2, then the n1 it names)", res.stats.attempts, res.stats.redirects)
	}
	if res = w.write(ctx); !res.ok || res.stats.attempts != 1 {
		t.Fatalf("the next write: %+v; want acknowledged at the first attempt, at n1", res)
	}
}

// fakeRegister is a node of one register that an HTTP test server answers for, with faults to
// order: a write that is stored but whose answer never comes, and a version that goes back.
type fakeRegister struct {
	mu        sync.Mutex
	version   uint64
	value     string
	hangNext  bool // store the next write, then answer nothing
	forgetAt1 bool // after version 1, answer as if at version 0 (an acknowledged write lost)
}

func (f *fakeRegister) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	if f.forgetAt1 && f.version == 1 {
		f.version, f.value = 0, ""
	}
	reply := regReply{Outcome: "ok", Version: f.version, Value: f.value}
	hang := false
	if r.URL.Path == "/write" {
		expect, _ := strconv.ParseUint(q.Get("expect"), 10, 64)
		if expect != f.version {
			reply.Outcome = "conflict"
		} else {
			f.version, f.value = f.version+1, q.Get("value")
			reply.Version = f.version
			hang, f.hangNext = f.hangNext, false
		}
	}
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	json.NewEncoder(w).Encode(reply)
}

func fakeNode(t *testing.T, f *fakeRegister) *router {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return newRouter([]string{"n1"}, []*RuntimeClient{{Base: srv.URL, HTTP: srv.Client()}}, 100*time.Millisecond, time.Millisecond)
}

// S-X9: a write whose answer was lost but which was stored comes back, sent again, as a conflict
// at the version it made; the writer reads the key, finds its value there and counts the write
// acknowledged (late), not failed, nor a broken promise.
func TestWriter_UnknownThenStored(t *testing.T) {
	f := &fakeRegister{hangNext: true}
	w := &writer{r: fakeNode(t, f), key: "registers/k0", budget: 10 * time.Second}
	res := w.write(context.Background())
	if !res.ok || !res.late || res.version != 1 || res.stats.unknown != 1 || res.anomaly {
		t.Fatalf("a stored write whose answer was lost: %+v (%v); want acknowledged late at version 1 after 1 unknown attempt", res, res.err)
	}
	if res = w.write(context.Background()); !res.ok || res.late || res.version != 2 {
		t.Fatalf("the next write: %+v; want acknowledged at version 2", res)
	}
}

// S-X9: a node at a version below one acknowledged to the writer is a lost write, reported as a
// broken promise.
func TestWriter_LostWrite(t *testing.T) {
	f := &fakeRegister{}
	w := &writer{r: fakeNode(t, f), key: "registers/k0", budget: 10 * time.Second}
	if res := w.write(context.Background()); !res.ok {
		t.Fatalf("first write: %+v", res)
	}
	f.mu.Lock()
	f.forgetAt1 = true
	f.mu.Unlock()
	res := w.write(context.Background())
	if res.ok || !res.anomaly || !strings.Contains(res.err.Error(), "acknowledged write was lost") {
		t.Fatalf("a write after the node lost version 1: %+v (%v); want a broken promise naming the lost write", res, res.err)
	}
}
