package core_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/replog/replogtest"
)

// mailer is an object whose alarm sends a mail: it fails while the mail server is down, and
// records on which node it succeeded.
type mailer struct {
	st   *core.State
	node string
	out  *mailbox
}

type mailbox struct {
	down atomic.Bool
	mu   sync.Mutex
	sent map[string][]string // by object: the nodes that sent its mail
}

func (m *mailer) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	if m.out.down.Load() {
		return errors.New("the mail server is down")
	}
	m.out.mu.Lock()
	m.out.sent[m.st.Name()] = append(m.out.sent[m.st.Name()], m.node)
	m.out.mu.Unlock()
	return nil
}

func (b *mailbox) of(name string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.sent[name]...)
}

type mailNode struct {
	*node
	mailers *core.Namespace[*mailer]
}

// openMailNode opens a node with Calls whose alarms are given up at their first failure.
func openMailNode(t *testing.T, c *replogtest.MemCluster, name string, box *mailbox) *mailNode {
	t.Helper()
	n := &node{view: c.Node(), dir: t.TempDir()}
	rt, err := core.Open(core.Options{Dir: n.dir, Logger: slog.New(slog.DiscardHandler),
		AlarmRetry: core.RetryPolicy{MaxRetries: -1},
		Replication: &core.Replication{Node: name, Log: n.view.Log(), Leases: n.view.Leases(), Beacon: n.view.Beacon(),
			Calls: n.view.Calls(), LeaseTTL: alarmTTL}})
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	n.rt = rt
	ns, err := core.Register(n.rt, "mailers", func(_ context.Context, st *core.State) (*mailer, error) {
		return &mailer{st: st, node: name, out: box}, nil
	})
	require.NoError(t, err)
	return &mailNode{node: n, mailers: ns}
}

// mailerAt returns the name of a mailer whose shard c's placement puts at node among nodes, and
// at then among the others.
func mailerAt(c *replogtest.MemCluster, node string, nodes []string, then string, others []string, skip int) string {
	for i := 0; ; i++ {
		name := "m" + strconv.Itoa(i)
		shard := c.ShardOf("mailers/" + name)
		if replica.Place(shard, nodes) == node && replica.Place(shard, others) == then {
			if skip == 0 {
				return name
			}
			skip--
		}
	}
}

func (n *mailNode) arm(t *testing.T, name string, at time.Time) {
	t.Helper()
	stub, err := n.mailers.Get(name)
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, m *mailer) error {
		return m.st.SetAlarm(ctx, at)
	}))
}

// S-CL9: dead letters are the cluster's. Two alarms given up at node 1 are listed, with the same
// numbers, by every node; one re-armed from node 2, which does not own it, runs at node 1, its
// owner; node 1 dies, and the other, still listed by the survivors, re-armed from the survivor that
// does not own it, runs at the one that took its shard over. A re-armed letter leaves every node's
// list, and its number then names nothing.
func TestClusterDeadLettersFromAnyNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		box := &mailbox{sent: map[string][]string{}}
		box.down.Store(true)
		all := []string{"n1", "n2", "n3"}
		n1 := openMailNode(t, c, "n1", box)
		n2 := openMailNode(t, c, "n2", box)
		defer n2.rt.Close()
		n3 := openMailNode(t, c, "n3", box)
		defer n3.rt.Close()
		time.Sleep(3 * alarmTTL) // settled: each node holds the shards placement gives it

		first := mailerAt(c, "n1", all, "n2", all[1:], 0)  // owned by n1, then by n2
		second := mailerAt(c, "n1", all, "n3", all[1:], 0) // owned by n1, then by n3
		due := time.Now().Add(time.Second)
		n1.arm(t, first, due)
		n1.arm(t, second, due)
		time.Sleep(5 * time.Second)
		synctest.Wait()

		letters := func(n *mailNode) map[string]core.DeadLetter {
			t.Helper()
			dls, err := n.rt.Admin().DeadLetters()
			require.NoError(t, err)
			out := map[string]core.DeadLetter{}
			for _, dl := range dls {
				out[dl.Name] = dl
			}
			return out
		}
		at1 := letters(n1)
		require.Len(t, at1, 2, "both alarms were given up: %v", at1)
		for _, n := range []*mailNode{n2, n3} {
			got := letters(n)
			for _, name := range []string{first, second} {
				require.Equal(t, at1[name].Seq, got[name].Seq, "every node lists %s's letter under one number", name)
				require.Equal(t, "the mail server is down", got[name].LastError)
				require.True(t, got[name].Scheduled.Equal(due), "its time: got %v, want %v", got[name].Scheduled, due)
			}
		}

		box.down.Store(false)
		ctx := context.Background()
		require.NoError(t, n2.rt.Admin().Rearm(ctx, at1[first].Seq, time.Now()), "re-armed from a node that does not own it")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []string{"n1"}, box.of(first), "the re-armed alarm ran once, at its owner")
		for _, n := range []*mailNode{n1, n2, n3} {
			require.NotContains(t, letters(n), first, "a re-armed letter leaves every node's list")
		}
		err := n3.rt.Admin().Rearm(ctx, at1[first].Seq, time.Now())
		require.ErrorContains(t, err, "no dead letter", "its number names nothing now")

		// Node 1 dies as a machine does: no beats, no renewals, no appends, no calls, no Close.
		n1.view.CutBeacon(true)
		n1.view.CutLeases(true)
		n1.view.CutLog(true)
		n1.view.CutCalls(true)
		time.Sleep(3 * alarmTTL) // the survivors took its shards over
		require.Contains(t, letters(n2), second, "the survivors list the letters of a dead node")
		require.NoError(t, n2.rt.Admin().Rearm(ctx, at1[second].Seq, time.Now()), "re-armed from a survivor that does not own it")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []string{"n3"}, box.of(second), "the re-armed alarm ran once, at the survivor that took its shard")
		require.Empty(t, letters(n3))
		require.Empty(t, letters(n2))
		n1.rt.Close()
	})
}

// S-CL9: node 1 appends a letter to the cluster's list and dies before the turn that gives the
// alarm up commits; node 2 takes the shard over and gives the alarm up again, appending the letter
// again. It is listed once; re-arming it arms the alarm once and leaves no letter behind.
func TestClusterDeadLetterWrittenTwiceListedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		box := &mailbox{sent: map[string][]string{}}
		box.down.Store(true)
		n1 := openMailNode(t, c, "n1", box)
		n2 := openMailNode(t, c, "n2", box)
		defer n2.rt.Close()
		time.Sleep(3 * alarmTTL)
		name := mailerAt(c, "n1", []string{"n1", "n2"}, "n2", []string{"n2"}, 0)
		var lettered, died atomic.Bool
		n1.view.BeforeAppend(func(key string, _ []byte) error {
			if key == "_durable/dead-letters" {
				lettered.Store(true) // this append goes through
				return nil
			}
			if lettered.Load() {
				// The next append, the turn's commit, never leaves: node 1 dies here.
				died.Store(true)
				n1.view.CutBeacon(true)
				n1.view.CutLeases(true)
				n1.view.CutLog(true)
				n1.view.CutCalls(true)
				return errors.New("the node died")
			}
			return nil
		})
		n1.arm(t, name, time.Now().Add(time.Second))
		time.Sleep(time.Minute)
		synctest.Wait()
		require.True(t, died.Load(), "node 1 died between the letter and the commit")

		letters := 0
		for _, rec := range c.Records("_durable/dead-letters") {
			if strings.Contains(string(rec), `"letter"`) {
				letters++
			}
		}
		require.Equal(t, 2, letters, "the letter was written twice")
		dls, err := n2.rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Len(t, dls, 1, "and is listed once: %+v", dls)

		box.down.Store(false)
		require.NoError(t, n2.rt.Admin().Rearm(context.Background(), dls[0].Seq, time.Now()))
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []string{"n2"}, box.of(name), "the alarm ran once")
		dls, err = n2.rt.Admin().DeadLetters()
		require.NoError(t, err)
		require.Empty(t, dls, "no letter is left behind")
		n1.rt.Close()
	})
}
