package core_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// clusterTTL is the lease time of the cluster-mode tests.
const clusterTTL = 4 * time.Second

// node is one runtime of a test cluster: its own directory, its own view of the shared engine.
type node struct {
	rt   *core.Runtime
	view *replogtest.MemNode
	ns   *core.Namespace[*core.State]
	dir  string
}

// openNode opens a runtime named name over a directory of its own, as one node of c. Close is the
// test's to call (or not: an abandoned node).
func openNode(t *testing.T, c *replogtest.MemCluster, name string, edit ...func(*core.Options)) *node {
	t.Helper()
	n := &node{view: c.Node(), dir: t.TempDir()}
	opts := core.Options{Dir: n.dir, Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: n.view.Log(), Leases: n.view.Leases(), Beacon: n.view.Beacon(), LeaseTTL: clusterTTL}}
	for _, e := range edit {
		e(&opts)
	}
	rt, err := core.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() }) // a second Close is a no-op: tests close nodes themselves to drain them
	n.rt = rt
	n.ns, err = core.Register(rt, "kv", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
	require.NoError(t, err)
	return n
}

func (n *node) put(name, key, value string) error {
	stub, err := n.ns.Get(name)
	if err != nil {
		return err
	}
	return core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
		return st.Storage().Put(ctx, key, []byte(value))
	})
}

func (n *node) get(name, key string) (string, error) {
	stub, err := n.ns.Get(name)
	if err != nil {
		return "", err
	}
	return core.Call(context.Background(), stub, func(ctx context.Context, st *core.State) (string, error) {
		v, ok, err := st.Storage().Get(ctx, key)
		if !ok && err == nil {
			return "", fmt.Errorf("no key %q", key)
		}
		return string(v), err
	})
}

// requireNumbered checks that object name holds the values v0..v(n-1) under the keys k0..k(n-1).
func (n *node) requireNumbered(t *testing.T, name string, count int) {
	t.Helper()
	for i := range count {
		v, err := n.get(name, "k"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), v)
	}
}

// S-CL1, S-CL4: a write acknowledged on node 1 is read on node 2 once node 1 has closed (its leases
// handed back: node 2 takes the object at once), though node 2's directory never held the object.
func TestClusterReadAfterDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		for i := range 5 {
			require.NoError(t, n1.put("counter", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		_, err := n2.get("counter", "k0")
		require.ErrorIs(t, err, core.ErrNotOwner, "node 2 while node 1 holds the lease")
		var noe *core.NotOwnerError
		require.ErrorAs(t, err, &noe)
		require.Equal(t, "n1", noe.Holder)

		require.NoError(t, n1.rt.Close())
		n2.requireNumbered(t, "counter", 5)
		require.NoError(t, n2.put("counter", "k5", "v5"))
		files, _ := filepath.Glob(filepath.Join(n2.dir, "kv", "*.sqlite"))
		require.Len(t, files, 1, "node 2 rebuilt the object into its own directory")
	})
}

// S-CL4, S-CL5: a node abandoned without Close (cut off from the engine, as a dead or partitioned
// machine is) keeps its lease only until it stops renewing: node 2 takes the object once it has
// seen the lease unrenewed for LeaseTTL by its own clock, and reads what node 1 acknowledged. Node 1,
// unable to prove its lease, refuses to serve the object.
func TestClusterTakeoverAfterExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		require.NoError(t, n1.put("acct", "balance", "100"))
		n1.view.CutLog(true)
		n1.view.CutLeases(true)

		_, err := n2.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner, "the lease was renewed moments ago")
		time.Sleep(clusterTTL / 2)
		_, err = n2.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner, "seen unrenewed for half the TTL only")
		time.Sleep(clusterTTL / 2)
		v, err := n2.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "100", v)

		_, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrLeaseUnproven, "node 1 cannot renew: it must not serve")
		require.True(t, core.IsRetryable(err))
		n1.view.CutLog(false)
		n1.view.CutLeases(false)
		_, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrFenced, "back in touch, node 1 finds its lease taken")
		_, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner, "and from then on names node 2")
		n1.rt.Close()
	})
}

// S-CL4: the shard leases a node refused calls for are remembered while calls keep coming (or
// while their holder's beats name them) and forgotten 2 LeaseTTL after the last, so that refusals
// do not pile up; one forgotten and asked for again is timed afresh before it is taken over.
func TestClusterForgetsLeasesNoLongerAskedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		const objects = 50
		shards := map[int]bool{}
		for i := range objects {
			require.NoError(t, n1.put("o"+strconv.Itoa(i), "k", "v"))
			shards[c.ShardOf("kv/o"+strconv.Itoa(i))] = true
		}
		for i := range objects {
			_, err := n2.get("o"+strconv.Itoa(i), "k")
			require.ErrorIs(t, err, core.ErrNotOwner)
		}
		require.Equal(t, int64(len(shards)), n2.rt.Stats().Cluster.WatchedLeases)
		other := "" // an object in another shard than o0's
		for i := 1; other == ""; i++ {
			if c.ShardOf("kv/o"+strconv.Itoa(i)) != c.ShardOf("kv/o0") {
				other = "o" + strconv.Itoa(i)
			}
		}

		// Node 1 is cut off from the engine: its beats stop naming the leases it cannot renew.
		// Calls for o0 keep its shard's lease watched; the others are forgotten.
		n1.view.CutLog(true)
		n1.view.CutLeases(true)
		for range 4 {
			time.Sleep(clusterTTL * 3 / 4)
			_, err := n2.get("o0", "k")
			if err == nil {
				break // o0 was taken over: seen unrenewed for LeaseTTL
			}
			require.ErrorIs(t, err, core.ErrNotOwner)
		}
		v, err := n2.get("o0", "k")
		require.NoError(t, err, "o0, watched all along, is taken over once LeaseTTL has passed")
		require.Equal(t, "v", v)
		require.Equal(t, int64(len(shards)-1), n2.rt.Stats().Cluster.WatchedLeases, "o0's shard is held now; the others are remembered")
		time.Sleep(2*clusterTTL + clusterTTL/2)
		require.Equal(t, int64(0), n2.rt.Stats().Cluster.WatchedLeases, "the others were forgotten")

		// The other shard was forgotten: its lease, unrenewed for 3 LeaseTTL by now, is timed afresh.
		_, err = n2.get(other, "k")
		require.ErrorIs(t, err, core.ErrNotOwner, "a forgotten lease is timed afresh")
		time.Sleep(clusterTTL)
		v, err = n2.get(other, "k")
		require.NoError(t, err)
		require.Equal(t, "v", v)
		n1.rt.Close()
	})
}

// S-CL5: a node cut off from the leases stops serving once its lease lapses by its own clock, reads
// included, and serves again once it can renew (nobody took the object meanwhile).
func TestClusterReadsRefusedWhenLeaseLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		defer n1.rt.Close()
		require.NoError(t, n1.put("acct", "balance", "7"))
		n1.view.CutLeases(true)
		v, err := n1.get("acct", "balance")
		require.NoError(t, err, "the lease was renewed within LeaseTTL less the margin")
		require.Equal(t, "7", v)
		time.Sleep(clusterTTL)
		_, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrLeaseUnproven)
		require.ErrorIs(t, n1.put("acct", "balance", "8"), core.ErrLeaseUnproven)
		n1.view.CutLeases(false)
		v, err = n1.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "7", v, "the refused write left nothing")
	})
}

// S-CL5: a paused owner, resumed after another node took the object over and wrote, does not
// serve the value it held: its first turn finds its lease lapsed, tries to renew it, learns it
// was taken over, and refuses. Without the lease check at a turn's start it would read its own
// stale file and answer the old balance.
func TestClusterPausedOwnerDoesNotServeStaleRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		require.NoError(t, n1.put("acct", "balance", "100"))
		v, err := n1.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "100", v, "the object is resident on n1, its file open")

		n1.view.CutLog(true) // paused: nothing n1 does reaches the engine
		n1.view.CutLeases(true)
		_, err = n2.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(clusterTTL)
		require.NoError(t, n2.put("acct", "balance", "200"), "n2 took the object over")

		n1.view.CutLog(false) // resumed
		n1.view.CutLeases(false)
		v, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrFenced, "n1 must refuse, not answer %q", v)
		v, err = n2.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "200", v)
		n1.rt.Close()
	})
}

// S-CL4: a node whose renewals keep failing (its quorum is gone) says so once, not at every round,
// and says once that the lease is renewed again.
func TestClusterRenewalFailuresLoggedOncePerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		logs := newLogCapture()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.Logger, o.IdleTimeout = slog.New(logs), time.Hour })
		defer n1.rt.Close()
		require.NoError(t, n1.put("acct", "balance", "1"))
		count := func(event string) int {
			n := 0
			for _, r := range logs.all() {
				if strings.Contains(r, "event="+event+" ") {
					n++
				}
			}
			return n
		}
		n1.view.CutLeases(true)
		time.Sleep(4 * clusterTTL) // 16 rounds of the renewer
		synctest.Wait()
		require.Equal(t, 1, count("lease_renew_failed"), "one line for a lease that keeps failing")
		n1.view.CutLeases(false)
		time.Sleep(clusterTTL)
		synctest.Wait()
		require.Equal(t, 1, count("lease_renewed"), "one line when it is renewed again: %v", logs.all())
		require.Equal(t, 1, count("lease_renew_failed"))
	})
}

// gatedWeb answers HTTP after a write, holding its turn until released.
type gatedWeb struct {
	st      *core.State
	entered chan struct{}
	hold    chan struct{}
}

func (g *gatedWeb) Fetch(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if err := g.st.Storage().Put(ctx, "balance", []byte(r.URL.Query().Get("v"))); err != nil {
		return err
	}
	if g.entered != nil {
		g.entered <- struct{}{}
		<-g.hold
	}
	fmt.Fprint(w, "written")
	return nil
}

// S-CL3: an old owner paused in a turn (its clock stopped, so its lease looks valid to it) while
// another node takes the object over is fenced at its commit: the log refuses its record, its
// callers get ErrFenced, its HTTP response is never sent, and its local file is discarded. The new
// owner never sees the write.
func TestClusterPausedOwnerFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		entered, hold := make(chan struct{}), make(chan struct{})
		frozen := time.Now()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.Now = func() time.Time { return frozen } })
		web1, err := core.Register(n1.rt, "web", func(_ context.Context, st *core.State) (*gatedWeb, error) {
			return &gatedWeb{st: st, entered: entered, hold: hold}, nil
		})
		require.NoError(t, err)
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		web2, err := core.Register(n2.rt, "web", func(_ context.Context, st *core.State) (*gatedWeb, error) {
			return &gatedWeb{st: st}, nil
		})
		require.NoError(t, err)
		read := func(ns *core.Namespace[*gatedWeb]) (string, error) {
			stub, _ := ns.Get("acct")
			return core.Call(context.Background(), stub, func(ctx context.Context, g *gatedWeb) (string, error) {
				v, _, err := g.st.Storage().Get(ctx, "balance")
				return string(v), err
			})
		}
		stub1, _ := web1.Get("acct")
		go func() { <-entered; hold <- struct{}{} }()
		rec := httptest.NewRecorder()
		stub1.ServeHTTP(rec, httptest.NewRequest("POST", "/?v=100", nil))
		require.Equal(t, 200, rec.Code)

		rec = httptest.NewRecorder()
		served := make(chan struct{})
		go func() { defer close(served); stub1.ServeHTTP(rec, httptest.NewRequest("POST", "/?v=999", nil)) }()
		<-entered // node 1 is inside the turn, its write made
		queued := make(chan error, 1)
		go func() {
			queued <- core.Do(context.Background(), stub1, func(ctx context.Context, g *gatedWeb) error {
				return g.st.Storage().Put(ctx, "other", []byte("x"))
			})
		}()
		n1.view.CutLeases(true) // node 1 pauses: no renewals, no beats
		n1.view.CutBeacon(true)
		_, err = read(web2)
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(clusterTTL)
		v, err := read(web2)
		require.NoError(t, err)
		require.Equal(t, "100", v)

		close(hold) // node 1 resumes
		<-served
		require.Equal(t, http.StatusMisdirectedRequest, rec.Code, "the fenced turn's response is never sent")
		require.NotContains(t, rec.Body.String(), "written")
		require.ErrorIs(t, <-queued, core.ErrFenced, "the turn that joined its batch is not acknowledged")
		require.False(t, core.IsRetryable(core.ErrFenced))
		files, _ := filepath.Glob(filepath.Join(n1.dir, "web", "*.sqlite*"))
		require.Empty(t, files, "the fenced node's local file is discarded")
		v, err = read(web2)
		require.NoError(t, err)
		require.Equal(t, "100", v)
		n1.view.CutLeases(false)
		_, err = read(web1)
		require.ErrorIs(t, err, core.ErrNotOwner)
		rec = httptest.NewRecorder()
		stub1.ServeHTTP(rec, httptest.NewRequest("POST", "/?v=5", nil))
		require.Equal(t, http.StatusMisdirectedRequest, rec.Code, "an object another node owns answers 421")
		n1.rt.Close()
	})
}

// S-CL2: an append whose outcome the log could not tell is resolved by reading the log's head: a
// record that landed is not appended twice, one that did not is appended again; a commit whose
// outcome stays unknown is refused with ErrCommitUnknown, and the node rebuilds from the log.
func TestClusterUnknownAppendOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("acct", "a", "1"))
		before := len(c.Records("kv/acct"))

		n1.view.LoseAcks(1) // lands, reported unknown
		require.NoError(t, n1.put("acct", "b", "2"))
		require.Len(t, c.Records("kv/acct"), before+1, "one record, not two")
		n1.view.DropAppends(1) // does not land, reported unknown
		require.NoError(t, n1.put("acct", "c", "3"))
		require.Len(t, c.Records("kv/acct"), before+2)

		n1.view.DropAppends(100)
		err := n1.put("acct", "d", "4")
		require.ErrorIs(t, err, core.ErrCommitUnknown)
		require.False(t, core.IsRetryable(err), "a blind retry could apply it twice")
		n1.view.DropAppends(0)
		for k, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
			v, err := n1.get("acct", k)
			require.NoError(t, err)
			require.Equal(t, want, v)
		}
		_, err = n1.get("acct", "d")
		require.ErrorContains(t, err, "no key", "the unknown commit did not land: the file was rebuilt without it")
		require.NoError(t, n1.rt.Close())

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		v, err := n2.get("acct", "c")
		require.NoError(t, err)
		require.Equal(t, "3", v)
	})
}

// copyDir copies the files of src (one level of subdirectories) into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(path, ".lock") || strings.HasSuffix(path, "-shm") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	require.NoError(t, err)
}

// S-CL6: a local file ahead of the log (the node stopped between its local COMMIT and the append)
// is found out at the next activation, by the position row its commit wrote, and rebuilt from the
// log: the write that never reached the log is gone, as its caller was never told it was made.
func TestClusterFileAheadDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("acct", "balance", "100"))
		crashed := t.TempDir()
		n1.view.BeforeAppend(func(string, []byte) error {
			copyDir(t, n1.dir, crashed) // the machine dies here: the local COMMIT is made, the record is not sent
			return errors.New("the machine died")
		})
		require.Error(t, n1.put("acct", "balance", "999"))
		n1.view.BeforeAppend(nil)
		require.NoError(t, n1.rt.Close())

		files, _ := filepath.Glob(filepath.Join(crashed, "kv", "*.sqlite"))
		require.Len(t, files, 1)
		n3 := openNode(t, c, "n3", func(o *core.Options) { o.Dir = crashed }) // the machine restarts on its old disk
		defer n3.rt.Close()
		v, err := n3.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "100", v, "the file ahead of the log was rebuilt from it")
		require.NoError(t, n3.put("acct", "balance", "101"))
		v, err = n3.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "101", v)
	})
}

// S-CL6: with the local SQLite at synchronous NORMAL (cluster mode's default), a node whose disk
// lost its last commits (a power loss: the file as it was before them) still serves every
// acknowledged write: the log holds them, and the file is caught up from it.
func TestClusterNormalLocalDiskLosesTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		for i := range 2 {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		disk := t.TempDir()
		copyDir(t, n1.dir, disk) // what the disk holds when the power goes: the later commits never synced
		for i := 2; i < 5; i++ {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		n1.view.CutLog(true) // the machine is gone: no drain
		n1.view.CutLeases(true)

		n1b := openNode(t, c, "n1", func(o *core.Options) { o.Dir = disk }) // it restarts on that disk
		defer n1b.rt.Close()
		_, err := n1b.get("acct", "k0")
		require.ErrorIs(t, err, core.ErrNotOwner, "its own old lease, until seen unrenewed for LeaseTTL")
		time.Sleep(clusterTTL)
		n1b.requireNumbered(t, "acct", 5)
		require.NoError(t, n1b.put("acct", "k5", "v5"))
		n1b.requireNumbered(t, "acct", 6)
	})
}

// S-CL7: every SnapshotEvery records the owner writes a snapshot (the database file as a blob, a
// record pointing at it), trims the records before it and deletes the previous blob; a node with
// an empty directory rebuilds from the snapshot and the records after it.
func TestClusterSnapshotTrimRebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.Replication.SnapshotEvery = 5 })
		for i := range 12 {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		recs := c.Records("kv/acct")
		require.Less(t, len(recs), 13, "records before the snapshot are trimmed")
		require.Equal(t, byte(3), recs[0][1], "the log starts at its snapshot record")
		require.Len(t, c.Blobs(), 1, "the previous snapshot's blob is deleted")
		require.GreaterOrEqual(t, n1.rt.Stats().Cluster.Snapshots, int64(2))
		require.NoError(t, n1.rt.Close())

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		n2.requireNumbered(t, "acct", 12)
	})
}

// S-CL8: a commit larger than MaxRecordBytes is appended as several records, the last completing it;
// another node replays it whole.
func TestClusterLargeCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		big := make([]byte, 3<<20)
		rand.Read(big) // incompressible
		stub, _ := n1.ns.Get("blob")
		before, _ := c.Appended()
		err := core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
			s := st.Storage()
			if _, err := s.Exec(ctx, "CREATE TABLE big(b BLOB)"); err != nil {
				return err
			}
			_, err := s.Exec(ctx, "INSERT INTO big VALUES (?)", big)
			return err
		})
		require.NoError(t, err)
		after, _ := c.Appended()
		require.GreaterOrEqual(t, after-before, int64(4), "an epoch record and at least three parts")
		for _, r := range c.Records("kv/blob") {
			require.LessOrEqual(t, len(r), replog.MaxRecordBytes)
		}
		require.NoError(t, n1.rt.Close())

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		stub2, _ := n2.ns.Get("blob")
		got, err := core.Call(context.Background(), stub2, func(ctx context.Context, st *core.State) ([]byte, error) {
			var b []byte
			err := st.Storage().One(ctx, "SELECT b FROM big").Scan(&b)
			return b, err
		})
		require.NoError(t, err)
		require.True(t, bytes.Equal(big, got), "the large commit came back whole")
	})
}

// alarmed records its alarm runs.
type alarmed struct {
	st  *core.State
	ran chan string
}

func (a *alarmed) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	a.ran <- a.st.Name()
	return a.st.Storage().Put(ctx, "alarm", []byte("ran"))
}

// S-CL9: only the owner runs an object's alarm; an object rebuilt on another node has its timers
// indexed there, and its alarm fires there.
func TestClusterAlarmFollowsOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		reg := func(n *node) (*core.Namespace[*alarmed], chan string) {
			ran := make(chan string, 4)
			ns, err := core.Register(n.rt, "alarms", func(_ context.Context, st *core.State) (*alarmed, error) {
				return &alarmed{st: st, ran: ran}, nil
			})
			require.NoError(t, err)
			return ns, ran
		}
		n1 := openNode(t, c, "n1")
		a1, ran1 := reg(n1)
		stub, _ := a1.Get("reminder")
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, a *alarmed) error {
			return a.st.SetAlarm(ctx, a.st.Now().Add(time.Minute))
		}))
		require.NoError(t, n1.rt.Close())

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		a2, ran2 := reg(n2)
		stub2, _ := a2.Get("reminder")
		at, err := core.Call(context.Background(), stub2, func(ctx context.Context, a *alarmed) (time.Time, error) {
			at, _, err := a.st.GetAlarm(ctx)
			return at, err
		})
		require.NoError(t, err)
		require.False(t, at.IsZero())
		time.Sleep(time.Until(at) + time.Second)
		synctest.Wait()
		select {
		case name := <-ran2:
			require.Equal(t, "reminder", name)
		default:
			t.Fatal("the alarm did not run on the node that rebuilt the object")
		}
		require.Empty(t, ran1)
	})
}

// S-CL11: cluster mode is checked at Open; Quarantine is refused in it, facets are not.
func TestClusterOptions(t *testing.T) {
	_, err := core.Open(core.Options{Replication: &core.Replication{}})
	require.ErrorContains(t, err, "Node is required")
	c := replogtest.NewMemCluster()
	_, err = core.Open(core.Options{Replication: &core.Replication{Node: "n1", Leases: c.Node().Leases()}})
	require.ErrorContains(t, err, "Log is nil")
	synctest.Test(t, func(t *testing.T) {
		n := openNode(t, c, "n1")
		defer n.rt.Close()
		_, err := core.RegisterFacet(n.rt, n.ns, "child", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
		require.NoError(t, err)
		_, err = n.rt.Admin().Quarantine(context.Background(), "kv", "x")
		require.ErrorIs(t, err, core.ErrClusterMode)
	})
}

// S-CL4: an object evicted for idleness hands its lease back: another node takes it at once.
func TestClusterEvictionHandsLeaseBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.IdleTimeout = time.Second })
		n2 := openNode(t, c, "n2")
		require.NoError(t, n1.put("acct", "balance", "3"))
		_, err := n2.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(1), n1.rt.Stats().Evictions)
		v, err := n2.get("acct", "balance")
		require.NoError(t, err, "no wait for the lease to expire")
		require.Equal(t, "3", v)
		_, err = n1.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner, "and node 1 now sends callers to node 2")
	})
}

// S-CL6: a node whose local file is behind the log (another node owned the object meanwhile) catches
// it up from the records after its position, without a rebuild; a node that cannot read the log
// hands the lease back instead of holding an object it cannot serve.
func TestClusterCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var logs bytes.Buffer
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		require.NoError(t, n1.put("acct", "a", "1"))
		require.NoError(t, n1.rt.Close())
		n2 := openNode(t, c, "n2")
		require.NoError(t, n2.put("acct", "b", "2"))
		require.NoError(t, n2.rt.Close())

		n1b := openNode(t, c, "n1", func(o *core.Options) {
			o.Dir = n1.dir
			o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		for k, want := range map[string]string{"a": "1", "b": "2"} {
			v, err := n1b.get("acct", k)
			require.NoError(t, err)
			require.Equal(t, want, v)
		}
		require.NoError(t, n1b.rt.Close())
		require.Equal(t, 1, strings.Count(logs.String(), "event=cluster_rebuild"), "built once, from nothing; caught up later, not rebuilt")

		n3 := openNode(t, c, "n3")
		n3.view.CutLog(true)
		_, err := n3.get("acct", "a")
		require.Error(t, err)
		n3.view.CutLog(false)
		n4 := openNode(t, c, "n4")
		v, err := n4.get("acct", "b")
		require.NoError(t, err, "node 3 handed the lease back")
		require.Equal(t, "2", v)
	})
}

// S-CL1: group commit carries over: each durable commit, whatever number of turns it holds, is one
// record in the log.
func TestClusterOneRecordPerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("acct", "k", "0"))
		before, commits := n1.rt.Stats().Cluster, n1.rt.Stats().Commits
		errs := make(chan error, 32)
		for i := range 32 {
			go func() { errs <- n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)) }()
		}
		for range 32 {
			require.NoError(t, <-errs)
		}
		after := n1.rt.Stats().Cluster
		shipped := after.Commits - before.Commits
		require.Equal(t, n1.rt.Stats().Commits-commits, shipped, "every durable commit shipped")
		require.Equal(t, shipped, after.Records-before.Records, "one record each")
		t.Logf("32 calls: %d commits", shipped)
		require.NoError(t, n1.rt.Close())
		n2 := openNode(t, c, "n2")
		n2.requireNumbered(t, "acct", 32)
	})
}

// S-CL8, S-CL6: a large commit whose parts stop half-way (the node died between two appends) is
// never applied: not by a node replaying the log, nor by the node itself restarting on a file that
// holds it whole.
func TestClusterLargeCommitCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("blob", "small", "kept"))
		big := make([]byte, 3<<20)
		rand.Read(big)
		crashed := t.TempDir()
		parts := 0
		n1.view.BeforeAppend(func(string, []byte) error {
			if parts++; parts == 2 {
				copyDir(t, n1.dir, crashed)
			}
			if parts >= 2 {
				return errors.New("the machine died")
			}
			return nil
		})
		stub, _ := n1.ns.Get("blob")
		err := core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
			_, err := st.Storage().Exec(ctx, "CREATE TABLE big(b BLOB); INSERT INTO big VALUES (?)", big)
			return err
		})
		require.Error(t, err)
		require.GreaterOrEqual(t, parts, 2, "the first part was appended, the second not")
		n1.view.BeforeAppend(nil)
		require.NoError(t, n1.rt.Close())

		hasBig := func(n *node) bool {
			stub, _ := n.ns.Get("blob")
			found, err := core.Call(context.Background(), stub, func(ctx context.Context, st *core.State) (bool, error) {
				var k int
				err := st.Storage().One(ctx, "SELECT count(*) FROM sqlite_schema WHERE name = 'big'").Scan(&k)
				return k > 0, err
			})
			require.NoError(t, err)
			return found
		}
		n3 := openNode(t, c, "n3", func(o *core.Options) { o.Dir = crashed })
		require.False(t, hasBig(n3), "the cut-off commit is not in the restarted node's file")
		v, err := n3.get("blob", "small")
		require.NoError(t, err)
		require.Equal(t, "kept", v)
		require.NoError(t, n3.rt.Close())
		n2 := openNode(t, c, "n2")
		require.False(t, hasBig(n2), "nor in a replay")
	})
}

// S-CL1: a record that does not match its checksum, or is not chained to the record before it, stops
// the replay with an error naming the object's log: the object is not served from it.
func TestClusterDamagedRecordRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("acct", "a", "1"))
		require.NoError(t, n1.put("acct", "b", "2"))
		require.NoError(t, n1.rt.Close())
		recs := c.Records("kv/acct")
		c.Tamper("kv/acct", len(recs)-1, func(rec []byte) { rec[len(rec)-1] ^= 0xff })

		n2 := openNode(t, c, "n2")
		_, err := n2.get("acct", "a")
		require.ErrorContains(t, err, "log record damaged")
		require.ErrorContains(t, err, "kv/acct")
		c.Tamper("kv/acct", len(recs)-1, func(rec []byte) { rec[len(rec)-1] ^= 0xff })
		v, err := n2.get("acct", "b")
		require.NoError(t, err, "repaired, the log serves again")
		require.Equal(t, "2", v)
	})
}

// S-CL5: a turn that comes back from an Await finds its lease checked again: a node that lost touch
// with the leases meanwhile refuses to go on (Await returns ErrLeaseUnproven), and a write the
// turn makes anyway is refused at its commit.
func TestClusterAwaitRechecksLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		require.NoError(t, n1.put("acct", "balance", "1"))
		stub, _ := n1.ns.Get("acct")
		var awaitErr, putErr error
		err := core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
			awaitErr = st.Await(ctx, func(context.Context) error {
				n1.view.CutLeases(true)
				time.Sleep(clusterTTL)
				return nil
			})
			putErr = st.Storage().Put(ctx, "balance", []byte("2")) // the code ignores the error
			return nil
		})
		require.ErrorIs(t, awaitErr, core.ErrLeaseUnproven)
		require.ErrorIs(t, err, core.ErrLeaseUnproven, "the write after it is refused at its commit (put: %v)", putErr)
		n1.view.CutLeases(false)
		v, err := n1.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "1", v)
	})
}

// S-CL3: a turn whose Await found the object fenced (the commit before it was refused) and that goes
// on anyway gets ErrFenced from storage: the object is no longer this node's to open.
func TestClusterFencedTurnGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		frozen := time.Now()
		n1 := openNode(t, c, "n1", func(o *core.Options) { o.Now = func() time.Time { return frozen } })
		n2 := openNode(t, c, "n2")
		require.NoError(t, n1.put("acct", "balance", "1"))
		stub, _ := n1.ns.Get("acct")
		entered, hold := make(chan struct{}), make(chan struct{})
		var awaitErr, putErr error
		done := make(chan error, 1)
		go func() {
			done <- core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
				if err := st.Storage().Put(ctx, "balance", []byte("2")); err != nil {
					return err
				}
				close(entered)
				<-hold
				awaitErr = st.Await(ctx, func(context.Context) error { return nil })
				putErr = st.Storage().Put(ctx, "balance", []byte("3"))
				return nil
			})
		}()
		<-entered
		n1.view.CutLeases(true) // node 1 pauses: no renewals, no beats
		n1.view.CutBeacon(true)
		_, err := n2.get("acct", "balance")
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(clusterTTL)
		v, err := n2.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "1", v)
		close(hold)
		require.NoError(t, <-done, "the code swallowed the errors")
		require.ErrorIs(t, awaitErr, core.ErrFenced)
		require.ErrorIs(t, putErr, core.ErrFenced)
		v, err = n2.get("acct", "balance")
		require.NoError(t, err)
		require.Equal(t, "1", v)
	})
}

// S-CL9: a node that restarts after a crash, on its old directory and under its old name, runs the
// alarms its index holds once its own former lease has lapsed: the alarm is late, not lost.
func TestClusterAlarmAfterCrashRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		ran := make(chan string, 4)
		reg := func(n *node) *core.Namespace[*alarmed] {
			ns, err := core.Register(n.rt, "alarms", func(_ context.Context, st *core.State) (*alarmed, error) {
				return &alarmed{st: st, ran: ran}, nil
			})
			require.NoError(t, err)
			return ns
		}
		n1 := openNode(t, c, "n1")
		stub, _ := reg(n1).Get("reminder")
		due := time.Now().Add(time.Minute)
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, a *alarmed) error {
			return a.st.SetAlarm(ctx, due)
		}))
		disk := t.TempDir()
		copyDir(t, n1.dir, disk) // the machine dies: its disk is what is left
		n1.view.CutLog(true)
		n1.view.CutLeases(true)

		n1b := openNode(t, c, "n1", func(o *core.Options) { o.Dir = disk })
		reg(n1b)
		time.Sleep(time.Until(due) + clusterTTL + time.Second)
		synctest.Wait()
		select {
		case name := <-ran:
			require.Equal(t, "reminder", name)
		default:
			t.Fatal("the restarted node did not run the alarm once its old lease lapsed")
		}
	})
}

// lateWriterLog is a node's log whose armed append lands, then another writer appends after it (a
// new owner that read it), and only then is the append reported unknown: its acknowledgement was
// lost.
type lateWriterLog struct {
	replog.Log
	other replog.Log
	armed bool
}

func (l *lateWriterLog) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	seq, err := l.Log.Append(ctx, key, expect, rec)
	if err != nil || !l.armed {
		return seq, err
	}
	l.armed = false
	if _, err := l.other.Append(ctx, key, seq, []byte("another writer's record")); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%w: the acknowledgement was lost", replog.ErrUnknown)
}

// S-CL2: an append whose acknowledgement was lost, and after which another writer appended, is in
// the log: its commit stands and its caller is answered, not told it was fenced.
func TestClusterUnknownAppendThenAnotherWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var late *lateWriterLog
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			late = &lateWriterLog{Log: o.Replication.Log, other: c.Node().Log()}
			o.Replication.Log = late
		})
		require.NoError(t, n1.put("acct", "a", "1"))
		before := len(c.Records("kv/acct"))
		late.armed = true
		require.NoError(t, n1.put("acct", "b", "2"), "the commit is in the log")
		recs := c.Records("kv/acct")
		require.Len(t, recs, before+2, "the commit's record, then the other writer's")
		require.Equal(t, "another writer's record", string(recs[len(recs)-1]))
	})
}

// S-CL7: the previous snapshot's blob is deleted by the next snapshot even when the node that
// writes it caught its file up from the log rather than rebuilding it (an object evicted and
// activated again): no blob is left that no record names.
func TestClusterSnapshotAfterCatchUpDeletesPrevious(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			o.Replication.SnapshotEvery = 5
			o.IdleTimeout = time.Second
		})
		defer n1.rt.Close()
		for i := range 6 {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		require.Len(t, c.Blobs(), 1, "a snapshot was written")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, int64(1), n1.rt.Stats().Evictions)
		for i := 6; i < 20; i++ {
			require.NoError(t, n1.put("acct", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
		}
		require.GreaterOrEqual(t, n1.rt.Stats().Cluster.Snapshots, int64(2))
		require.Len(t, c.Blobs(), 1, "the snapshot before the eviction is deleted by the one after")
		require.NoError(t, n1.rt.Close())
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		n2.requireNumbered(t, "acct", 20)
	})
}

// blindSnapshotLog is a node's log whose armed snapshot append lands but is reported unknown, and
// whose reads of the log's head then fail until the test sees again: the outcome cannot be told.
type blindSnapshotLog struct {
	replog.Log
	mu           sync.Mutex
	armed, blind bool
}

func (l *blindSnapshotLog) Append(ctx context.Context, key string, expect uint64, rec []byte) (uint64, error) {
	seq, err := l.Log.Append(ctx, key, expect, rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || !l.armed || rec[1] != 3 { // 3: a snapshot record
		return seq, err
	}
	l.armed, l.blind = false, true
	return 0, fmt.Errorf("%w: the acknowledgement was lost", replog.ErrUnknown)
}

func (l *blindSnapshotLog) Last(ctx context.Context, key string) (uint64, []byte, error) {
	l.mu.Lock()
	blind := l.blind
	l.mu.Unlock()
	if blind {
		return 0, nil, errors.New("the log's head could not be read")
	}
	return l.Log.Last(ctx, key)
}

func (l *blindSnapshotLog) set(armed, blind bool) {
	l.mu.Lock()
	l.armed, l.blind = armed, blind
	l.mu.Unlock()
}

func (l *blindSnapshotLog) isArmed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.armed
}

// snapshotBlind writes to object acct on n until its snapshot record is appended blind (blind
// armed), and returns how many keys it wrote.
func snapshotBlind(t *testing.T, n *node, blind *blindSnapshotLog) int {
	t.Helper()
	blind.set(true, false)
	written := 0
	for ; blind.isArmed(); written++ {
		require.Less(t, written, 20, "a snapshot record is appended")
		require.NoError(t, n.put("acct", "k"+strconv.Itoa(written), "v"+strconv.Itoa(written)))
	}
	time.Sleep(time.Second) // the snapshot's append gives up: its outcome is unknown
	blind.set(false, false)
	return written
}

func openBlindNode(t *testing.T, c *replogtest.MemCluster) (*node, *blindSnapshotLog) {
	var blind *blindSnapshotLog
	n := openNode(t, c, "n1", func(o *core.Options) {
		o.Replication.SnapshotEvery = 5
		blind = &blindSnapshotLog{Log: o.Replication.Log}
		o.Replication.Log = blind
	})
	return n, blind
}

// S-CL7, S-CL2: a snapshot record whose append outcome stays unknown may be in the log: its blob is
// kept, so that a node taking the object over (its owner gone silent) rebuilds it from that record.
func TestClusterSnapshotUnknownOutcomeKeepsBlob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, blind := openBlindNode(t, c)
		written := snapshotBlind(t, n1, blind)
		n1.view.CutLog(true) // the owner goes silent
		n1.view.CutLeases(true)

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		time.Sleep(clusterTTL)
		_, err := n2.get("acct", "k0")
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(clusterTTL)
		n2.requireNumbered(t, "acct", written)
	})
}

// S-CL7, S-CL2: after a snapshot record whose append outcome stayed unknown, the owner reads the
// log again before its next commit, which is not refused as if another node had appended.
func TestClusterSnapshotUnknownOutcomeNotFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1, blind := openBlindNode(t, c)
		written := snapshotBlind(t, n1, blind)
		require.NoError(t, n1.put("acct", "k"+strconv.Itoa(written), "v"+strconv.Itoa(written)),
			"the owner is not fenced by its own snapshot record")
		written++
		n1.requireNumbered(t, "acct", written)
		require.NoError(t, n1.rt.Close())

		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		n2.requireNumbered(t, "acct", written)
	})
}

// lostAckLeases is a node's leases whose armed Put lands but reports an error: its acknowledgement
// was lost.
type lostAckLeases struct {
	replog.Leases
	mu   sync.Mutex
	lose int
}

func (l *lostAckLeases) Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error) {
	nrev, err := l.Leases.Put(ctx, shard, value, rev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.lose > 0 {
		l.lose--
		return 0, errors.New("lease put: the acknowledgement was lost")
	}
	return nrev, err
}

// S-CL4: a renewal whose acknowledgement was lost (the lease moved to a revision the node was not
// told) does not cost the node its lease: it finds its own lease at that revision and goes on
// renewing it, serving the object throughout, and other nodes are still refused.
func TestClusterRenewalAckLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var lost *lostAckLeases
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			lost = &lostAckLeases{Leases: o.Replication.Leases}
			o.Replication.Leases = lost
		})
		defer n1.rt.Close()
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		acct := placedAt(c, "n1", []string{"n1", "n2"}, 1)[0] // node 1 keeps it once node 2 settles
		require.NoError(t, n1.put(acct, "balance", "1"))
		lost.mu.Lock()
		lost.lose = 1
		lost.mu.Unlock()
		for i := range 8 {
			time.Sleep(clusterTTL / 4)
			v, err := n1.get(acct, "balance")
			require.NoError(t, err, "after %d quarters of LeaseTTL", i+1)
			require.Equal(t, "1", v)
		}
		_, err := n2.get(acct, "balance")
		require.ErrorIs(t, err, core.ErrNotOwner)
		time.Sleep(clusterTTL)
		_, err = n2.get(acct, "balance")
		require.ErrorIs(t, err, core.ErrNotOwner, "node 1 renews its lease")
	})
}

// S-CL7: the records an object's log holds since its last snapshot are counted across activations:
// an object evicted and activated again, a few commits each time, is snapshotted once its log holds
// SnapshotEvery records, and its log is trimmed.
func TestClusterSnapshotCountsAcrossActivations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			o.Replication.SnapshotEvery = 5
			o.IdleTimeout = time.Second
		})
		defer n1.rt.Close()
		written := 0
		for round := range 5 {
			for range 2 {
				require.NoError(t, n1.put("acct", "k"+strconv.Itoa(written), "v"+strconv.Itoa(written)))
				written++
			}
			time.Sleep(3 * time.Second)
			synctest.Wait()
			require.Equal(t, int64(round+1), n1.rt.Stats().Evictions)
		}
		require.GreaterOrEqual(t, n1.rt.Stats().Cluster.Snapshots, int64(1))
		require.LessOrEqual(t, len(c.Records("kv/acct")), 5+3, "the log is trimmed at its snapshots")
		require.NoError(t, n1.rt.Close())
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		n2.requireNumbered(t, "acct", written)
	})
}

// slowLeases is a node's leases whose every Put takes delay, as a round trip to a quorum does.
type slowLeases struct {
	replog.Leases
	mu    sync.Mutex
	delay time.Duration
}

func (l *slowLeases) Put(ctx context.Context, shard int, value []byte, rev uint64) (uint64, error) {
	l.mu.Lock()
	d := l.delay
	l.mu.Unlock()
	time.Sleep(d)
	return l.Leases.Put(ctx, shard, value, rev)
}

// S-CL4: a node keeps the leases of all its resident objects, idle ones included, though each
// renewal takes a round trip: renewing them one after the other would take longer than LeaseTTL,
// and another node would take them over from a node that is up.
func TestClusterRenewsManyLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		var slow *slowLeases
		n1 := openNode(t, c, "n1", func(o *core.Options) {
			slow = &slowLeases{Leases: o.Replication.Leases}
			o.Replication.Leases = slow
			o.IdleTimeout = time.Minute // resident throughout
		})
		defer n1.rt.Close()
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		defer func() { // before the nodes close: no renewal under way holds a lease that Close hands back
			slow.mu.Lock()
			slow.delay = 0
			slow.mu.Unlock()
			time.Sleep(time.Second)
		}()
		const objects = 60
		names := placedAt(c, "n1", []string{"n1", "n2"}, objects) // node 1 keeps them once node 2 settles
		for i := range objects {
			require.NoError(t, n1.put(names[i], "k", "v"))
		}
		slow.mu.Lock()
		slow.delay = 100 * time.Millisecond // 60 renewals in a row: 6 s, more than LeaseTTL
		slow.mu.Unlock()
		for q := range 12 {
			time.Sleep(clusterTTL / 4)
			for i := range objects {
				_, err := n2.get(names[i], "k")
				require.ErrorIs(t, err, core.ErrNotOwner, "object %d after %d quarters of LeaseTTL", i, q+1)
			}
		}
	})
}

// S-CL4: a Shutdown that gives up on a turn that does not end still hands back the leases of the
// objects nothing is using: other nodes take those at once, while the busy one stays its node's
// until that turn ends.
func TestClusterAbandonedShutdownHandsIdleLeasesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		require.NoError(t, n1.put("idle", "k", "v"))
		require.NoError(t, n1.put("busy", "k", "v"))
		stub, err := n1.ns.Get("busy")
		require.NoError(t, err)
		release, hung := make(chan struct{}), make(chan error, 1)
		go func() {
			hung <- core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
				<-release // a turn that does not end by itself
				return st.Storage().Put(ctx, "k", []byte("late"))
			})
		}()
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = n1.rt.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the busy object's turn is still running")
		synctest.Wait() // the idle object's close, which Shutdown started
		v, err := n2.get("idle", "k")
		require.NoError(t, err, "the idle object's lease was handed back")
		require.Equal(t, "v", v)
		_, err = n2.get("busy", "k")
		require.ErrorIs(t, err, core.ErrNotOwner, "the busy object stays n1's while its turn runs")

		close(release)
		require.NoError(t, <-hung)
		require.NoError(t, n1.rt.Close())
		v, err = n2.get("busy", "k")
		require.NoError(t, err)
		require.Equal(t, "late", v)
	})
}
