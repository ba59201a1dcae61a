package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog/replogtest"
)

// BenchmarkClusterAlarmFire measures alarms fired per second in cluster mode by 1 node and by 3
// (nodes=N), in the same run: runtimes in this process over the in-memory engine (replogtest, 16
// shards, so that the figure is the runtime's own cost, not an engine's), 256 objects spread over
// the shards, each alarm's handler doing one storage write and arming the alarm again for now (in
// the same turn: one commit, one log record, its alarm entry written before it). Each node runs
// the alarms of the shards placement gives it, at most Options.AlarmConcurrency at a time. The
// metric alarms/s is fires over the loop's time. On one machine the nodes share its cores, so 3
// nodes show what the spreading costs or gains there, not what 3 machines would do.
func BenchmarkClusterAlarmFire(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchClusterAlarms(b, nodes, 256) })
	}
}

func benchClusterAlarms(b *testing.B, nodes, objects int) {
	c := replogtest.NewMemCluster()
	fired := make(chan struct{}, 1<<16)
	done := func() {
		select {
		case fired <- struct{}{}:
		default:
		}
	}
	var rts []*core.Runtime
	var nss []*core.Namespace[*ticker]
	for i := range nodes {
		view := c.Node()
		rt, err := core.Open(core.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Hour,
			Replication: &core.Replication{Node: fmt.Sprintf("n%d", i+1), Log: view.Log(), Leases: view.Leases(), Beacon: view.Beacon()}})
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close()
		rts = append(rts, rt)
		ns, err := core.Register(rt, "tickers", func(ctx context.Context, st *core.State) (*ticker, error) {
			_, err := st.Storage().Exec(ctx, "CREATE TABLE IF NOT EXISTS fired(at INTEGER NOT NULL)")
			return &ticker{st: st, done: done}, err
		})
		if err != nil {
			b.Fatal(err)
		}
		nss = append(nss, ns)
	}
	time.Sleep(4 * time.Second) // settled: each node holds the shards placement gives it (S-CL12)
	start := time.Now().Add(5 * time.Second)
	err := each(objects, 16, func(i int) error {
		// Armed at the node that holds the object's shard: the others refuse it (ErrNotOwner), and
		// a shard still being handed over is refused by both for a moment.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, ns := range nss {
				s, err := ns.Get(fmt.Sprint("o", i))
				if err != nil {
					return err
				}
				err = core.Do(context.Background(), s, func(ctx context.Context, t *ticker) error { return t.st.SetAlarm(ctx, start) })
				if !errors.Is(err, core.ErrNotOwner) && !errors.Is(err, core.ErrFenced) && !core.IsRetryable(err) {
					return err
				}
			}
		}
		return fmt.Errorf("no node serves o%d", i)
	})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Until(start))
	for len(fired) > 0 { // the loop counts only the fires it waits for
		<-fired
	}
	for b.Loop() {
		<-fired
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "alarms/s")
	for _, rt := range rts {
		rt.Close()
	}
}

// ticker is an object whose alarm does one storage write and arms itself again for now.
type ticker struct {
	st   *core.State
	done func()
}

func (t *ticker) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	now := t.st.Now()
	if _, err := t.st.Storage().Exec(ctx, "INSERT INTO fired(at) VALUES (?)", now.UnixNano()); err != nil {
		return err
	}
	if err := t.st.SetAlarm(ctx, now); err != nil {
		return err
	}
	t.done()
	return nil
}
