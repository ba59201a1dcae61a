//go:build !race

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// bell is an object whose alarm counts its runs and says where and when it ran.
type bell struct {
	st    *core.State
	node  string
	rings chan<- ring
}

type ring struct {
	node, name string
	at         time.Time
}

func (b *bell) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	v, _, err := b.st.Storage().Get(ctx, "runs")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(v))
	if err := b.st.Storage().Put(ctx, "runs", []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	b.rings <- ring{node: b.node, name: b.st.Name(), at: time.Now()}
	return nil
}

// S-CL9: alarms armed at one node of three over JetStream, the node cut off from the others 3 s
// before their time (to them, a crash: no beats, no renewals), nobody calling the objects: every
// alarm runs at a survivor, once, never before its time. The lateness is logged (p50, p99, max):
// it is the takeover's (the lease's lapse, plus a new stream leader where the lost node led the
// shard's raft group) for alarms due before the survivors hold their shards.
func TestCluster_AlarmsAfterOwnerLost(t *testing.T) {
	pc := startProxiedCluster(t)
	cfg := cluster.Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), Shards: 16}
	rings := make(chan ring, 1000)
	rts := make([]*core.Runtime, 3)
	nss := make([]*core.Namespace[*bell], 3)
	var lostConn *nats.Conn // the lost node's runtime's connection, closed as it dies
	for i := range 3 {
		nc := pc.conn(t, i)
		if i == 0 {
			lostConn = nc
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		e, err := cluster.New(ctx, nc, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		name := pc.cfgs[i].Name
		rt, err := core.Open(core.Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
			Replication: &core.Replication{Node: name, Log: e, Leases: e, Beacon: e}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		ns, err := core.Register(rt, "bells", func(_ context.Context, st *core.State) (*bell, error) {
			return &bell{st: st, node: name, rings: rings}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rts[i], nss[i] = rt, ns
	}
	// Every node ready and settled (eligible for a dead node's shards after 2 LeaseTTL).
	ready := time.Now()
	for _, rt := range rts {
		for rt.Stats().Cluster.Ready != nil || rt.Stats().Cluster.Members < 3 {
			if time.Since(ready) > time.Minute {
				t.Fatalf("not ready: %v", rt.Stats().Cluster.Ready)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(2500 * time.Millisecond)

	const objects = 24
	start := time.Now()
	due := start.Add(15 * time.Second) // room for arming on a loaded machine; the loss comes 3 s before
	for i := range objects {
		// Armed at the first node, or at the node placement gave the object's shard to.
		at := 0
		for attempt := 0; ; attempt++ {
			stub, err := nss[at].Get("b" + strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			err = core.Do(t.Context(), stub, func(ctx context.Context, b *bell) error { return b.st.SetAlarm(ctx, due) })
			var noe *core.NotOwnerError
			if errors.As(err, &noe) && attempt < 5 {
				for j, c := range pc.cfgs {
					if c.Name == noe.Holder {
						at = j
					}
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if left := time.Until(due); left < 4*time.Second {
		t.Fatalf("arming %d alarms took %v: the owner can no longer be lost 3 s before their time", objects, time.Since(start))
	}
	time.Sleep(time.Until(due.Add(-3 * time.Second)))
	pc.kill(0)
	lostConn.Close() // the lost node's runtime goes with its server
	killed := time.Now()

	got := map[string][]ring{}
	deadline := time.After(90 * time.Second)
	for len(got) < objects {
		select {
		case r := <-rings:
			got[r.name] = append(got[r.name], r)
		case <-deadline:
			t.Fatalf("%d of %d alarms ran within 90 s of their time", len(got), objects)
		}
	}
	var late []time.Duration
	for name, rs := range got {
		r := rs[0]
		if r.node == pc.cfgs[0].Name {
			t.Errorf("%s ran at the lost node", name)
		}
		if r.at.Before(due) {
			t.Errorf("%s ran %v before its time", name, due.Sub(r.at))
		}
		late = append(late, r.at.Sub(due))
	}
	// Each ran once in the object's storage, at its survivor.
	for i := range objects {
		name := "b" + strconv.Itoa(i)
		var runs string
		var err error
		for _, j := range []int{1, 2} {
			stub, _ := nss[j].Get(name)
			runs, err = core.Call(t.Context(), stub, func(ctx context.Context, b *bell) (string, error) {
				v, _, err := b.st.Storage().Get(ctx, "runs")
				return string(v), err
			})
			if err == nil {
				break
			}
		}
		if err != nil || runs != "1" {
			t.Errorf("%s: runs %q, %v; want 1", name, runs, err)
		}
	}
	// The lost node's runtime, cut off from everything, gives its objects up one engine timeout
	// after another: wait for it, so that nothing of it outlives the test.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := rts[0].Shutdown(ctx); err != nil {
		t.Logf("the lost node's shutdown: %v", err)
	}
	slices.Sort(late)
	q := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
	t.Logf("%d alarms, owner lost %.1f s before their time: lateness p50 %v, p99 %v, max %v",
		objects, due.Sub(killed).Seconds(), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
}
