package core_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/internal/replica"
	"github.com/durable-go/durable/internal/logrecord"
	"github.com/durable-go/durable/replog/replogtest"
)

// binder is a folder: an object that hosts page facets (pages host notes), in the cluster-mode tests.
type binder struct{ st *core.State }

// leaf is a page (or note) facet whose alarm says, on rings, what it held when it ran.
type leaf struct {
	st    *core.State
	rings chan string
}

func (p *leaf) Alarm(ctx context.Context, _ core.AlarmInfo) error {
	v, _, err := p.st.Storage().Get(ctx, "k0")
	if err != nil {
		return err
	}
	p.rings <- p.st.FacetPath() + "=" + string(v)
	return nil
}

// facetNode is a node of a test cluster with folders, their pages and the pages' notes.
type facetNode struct {
	*node
	folders *core.Namespace[*binder]
	pages   *core.FacetKind[*leaf]
	notes   *core.FacetKind[*leaf]
	rings   chan string
}

func openFacetNode(t *testing.T, c *replogtest.MemCluster, name string, edit ...func(*core.Options)) *facetNode {
	t.Helper()
	n := &facetNode{node: openNode(t, c, name, edit...), rings: make(chan string, 16)}
	var err error
	n.folders, err = core.Register(n.rt, "folders", func(_ context.Context, st *core.State) (*binder, error) { return &binder{st: st}, nil })
	require.NoError(t, err)
	newPage := func(_ context.Context, st *core.State) (*leaf, error) { return &leaf{st: st, rings: n.rings}, nil }
	n.pages, err = core.RegisterFacet(n.rt, n.folders, "page", newPage)
	require.NoError(t, err)
	n.notes, err = core.RegisterFacet(n.rt, n.pages, "note", newPage)
	require.NoError(t, err)
	return n
}

// folderAt returns the name of a folder whose shard placement gives to node among nodes.
func folderAt(c *replogtest.MemCluster, node string, nodes []string) string {
	return foldersAt(c, node, nodes, 1)[0]
}

// foldersAt returns the names of count such folders.
func foldersAt(c *replogtest.MemCluster, node string, nodes []string, count int) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		name := "f" + strconv.Itoa(i)
		if replica.Place(c.ShardOf("folders/"+name), nodes) == node {
			out = append(out, name)
		}
	}
	return out
}

// onPage runs fn on page pg of folder f (on note nt of the page, if nt is not ""), in a turn of
// the folder.
func (n *facetNode) onPage(f, pg, nt string, fn func(ctx context.Context, p *leaf) error) error {
	stub, err := n.folders.Get(f)
	if err != nil {
		return err
	}
	return core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) error {
		ps, err := n.pages.Get(fo.st, pg)
		if err != nil {
			return err
		}
		return core.Do(ctx, ps, func(ctx context.Context, p *leaf) error {
			if nt == "" {
				return fn(ctx, p)
			}
			ns, err := n.notes.Get(p.st, nt)
			if err != nil {
				return err
			}
			return core.Do(ctx, ns, fn)
		})
	})
}

func (n *facetNode) putPage(f, pg, nt, key, value string) error {
	return n.onPage(f, pg, nt, func(ctx context.Context, p *leaf) error { return p.st.Storage().Put(ctx, key, []byte(value)) })
}

func (n *facetNode) getPage(f, pg, nt, key string) (string, bool, error) {
	var v []byte
	var ok bool
	err := n.onPage(f, pg, nt, func(ctx context.Context, p *leaf) (err error) {
		v, ok, err = p.st.Storage().Get(ctx, key)
		return err
	})
	return string(v), ok, err
}

// requirePages checks that pages a and b (and note x of page a) of folder f hold the values
// count writes left: key ki = "<page>-vi".
func (n *facetNode) requirePages(t *testing.T, f string, count int) {
	t.Helper()
	stub, err := n.folders.Get(f)
	require.NoError(t, err)
	for i := range count {
		v, err := core.Call(context.Background(), stub, func(ctx context.Context, fo *binder) (string, error) {
			v, _, err := fo.st.Storage().Get(ctx, "k"+strconv.Itoa(i))
			return string(v), err
		})
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), v, "the folder's own key k%d", i)
	}
	for _, at := range [][2]string{{"a", ""}, {"b", ""}, {"a", "x"}} {
		for i := range count {
			v, ok, err := n.getPage(f, at[0], at[1], "k"+strconv.Itoa(i))
			require.NoError(t, err)
			require.True(t, ok, "leaf %v key k%d", at, i)
			require.Equal(t, at[0]+at[1]+"-v"+strconv.Itoa(i), v)
		}
	}
}

func (n *facetNode) writePages(t *testing.T, f string, count int) {
	t.Helper()
	stub, err := n.folders.Get(f)
	require.NoError(t, err)
	for i := range count {
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) error {
			return fo.st.Storage().Put(ctx, "k"+strconv.Itoa(i), []byte("v"+strconv.Itoa(i)))
		}))
		for _, at := range [][2]string{{"a", ""}, {"b", ""}, {"a", "x"}} {
			require.NoError(t, n.putPage(f, at[0], at[1], "k"+strconv.Itoa(i), at[0]+at[1]+"-v"+strconv.Itoa(i)))
		}
	}
}

// tagged counts the records of key's log that name a facet's database (or several).
func tagged(c *replogtest.MemCluster, key string) int {
	n := 0
	for _, rec := range c.Records(key) {
		if rec[2]&logrecord.Tagged != 0 {
			n++
		}
	}
	return n
}

// S-CL11: a facet's commits are records of its root's log: once the root's owner is cut off and
// another node takes its shard over, every acknowledged write of its facets (nested ones too) is
// read there, though that node's directory never held them.
func TestClusterFacetsMoveWithParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		n1 := openFacetNode(t, c, "n1")
		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		f := folderAt(c, "n1", nodes)
		n1.writePages(t, f, 4)
		require.GreaterOrEqual(t, tagged(c, "folders/"+f), 12, "each facet commit is a record of the binder's log")

		n1.view.CutLog(true) // node 1 is lost: no appends, no renewals, no beats
		n1.view.CutLeases(true)
		n1.view.CutBeacon(true)
		time.Sleep(clusterTTL + time.Second)
		n2.requirePages(t, f, 4)
		n2.writePages(t, f, 6) // and they go on from there
		n2.requirePages(t, f, 6)
		n1.rt.Close()
	})
}

// S-CL3, S-CL11: a facet is fenced with its root. A node paused in a turn of a facet, called from a
// turn of its root that writes the root next, whose shard another node took over meanwhile (reading
// the root only), commits neither: the facet's record is refused (the log moved on: the new owner's
// epoch record in the root's log), the root's turn fails with it, and node 1 serves neither from
// then on.
func TestClusterFacetFencedWithParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		frozen := time.Now()
		n1 := openFacetNode(t, c, "n1", func(o *core.Options) { o.Now = func() time.Time { return frozen } })
		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		f := folderAt(c, "n1", nodes)
		require.NoError(t, n1.putPage(f, "a", "", "k0", "100"))
		getFolder := func(n *facetNode) (string, bool, error) {
			stub, _ := n.folders.Get(f)
			var v []byte
			var ok bool
			err := core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) (err error) {
				v, ok, err = fo.st.Storage().Get(ctx, "folder")
				return err
			})
			return string(v), ok, err
		}

		entered, resume := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			stub, _ := n1.folders.Get(f)
			done <- core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) error {
				ps, err := n1.pages.Get(fo.st, "a")
				if err != nil {
					return err
				}
				if err := core.Do(ctx, ps, func(ctx context.Context, p *leaf) error {
					if err := p.st.Storage().Put(ctx, "k0", []byte("999")); err != nil {
						return err
					}
					close(entered)
					<-resume // node 1 pauses here; its clock says its lease is still good
					return nil
				}); err != nil {
					return err
				}
				return fo.st.Storage().Put(ctx, "folder", []byte("999"))
			})
		}()
		<-entered
		n1.view.CutLeases(true)
		n1.view.CutBeacon(true)
		time.Sleep(clusterTTL + time.Second)
		_, ok, err := getFolder(n2) // node 2 takes the folder over; it does not touch the page
		require.NoError(t, err)
		require.False(t, ok)
		_, _, err = n1.getPage(f, "c", "", "k0")
		require.ErrorIs(t, err, core.ErrFenced, "a facet node 1 opens now finds the folder's log moved on")

		close(resume)
		require.ErrorIs(t, <-done, core.ErrFenced, "the facet's write, and with it the folder's turn, is refused")
		require.Error(t, n1.putPage(f, "b", "", "k0", "999"), "node 1 no longer serves the folder or its facets")

		v, _, err := n2.getPage(f, "a", "", "k0")
		require.NoError(t, err)
		require.Equal(t, "100", v, "the fenced facet write is nowhere")
		_, ok, err = getFolder(n2)
		require.NoError(t, err)
		require.False(t, ok, "nor the folder's write of the same turn")
		_, ok, err = n2.getPage(f, "b", "", "k0")
		require.NoError(t, err)
		require.False(t, ok)
		n1.rt.Close()
	})
}

// S-CL7, S-CL11: a snapshot of an object with facets carries every database (a blob each, built
// from the log), the records before it are trimmed and the previous snapshot's blobs deleted; a
// node that takes the object over rebuilds the root and each facet from it and the records after.
func TestClusterFacetsSnapshotRebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		n1 := openFacetNode(t, c, "n1", func(o *core.Options) { o.Replication.SnapshotEvery = 10 })
		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		f := folderAt(c, "n1", nodes)
		n1.writePages(t, f, 12)
		recs := c.Records("folders/" + f)
		require.Less(t, len(recs), 48, "records before the snapshot are trimmed")
		require.Equal(t, byte(logrecord.Snapshot), recs[0][1], "the log starts at its snapshot record")
		require.NotZero(t, recs[0][2]&logrecord.Tagged, "which names each database")
		require.Len(t, c.Blobs(), 4, "a blob for the folder and each of its three facets; the previous ones deleted")
		require.GreaterOrEqual(t, n1.rt.Stats().Cluster.Snapshots, int64(2))
		require.NoError(t, n1.rt.Close())

		n2.requirePages(t, f, 12)
	})
}

// S-CL9, S-CL11: a facet's alarm (a timer of its root's) fires on the node that took the root's
// shard over after its owner was lost, nothing calling it, and the facet it runs is rebuilt from the
// log.
func TestClusterFacetAlarmAfterTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		n1 := openFacetNode(t, c, "n1")
		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		f := folderAt(c, "n1", nodes)
		at := time.Now().Add(time.Minute)
		require.NoError(t, n1.putPage(f, "a", "x", "k0", "kept"))
		require.NoError(t, n1.onPage(f, "a", "x", func(ctx context.Context, p *leaf) error { return p.st.SetAlarm(ctx, at) }))

		n1.view.CutLog(true)
		n1.view.CutLeases(true)
		n1.view.CutBeacon(true)
		time.Sleep(time.Until(at) + time.Second)
		synctest.Wait()
		select {
		case got := <-n2.rings:
			require.Equal(t, "page=a/note=x=kept", got)
		default:
			t.Fatal("the facet's alarm did not run on the node that took its root over")
		}
		require.Empty(t, n1.rings)
		n1.rt.Close()
	})
}

// S-CL11: DeleteAll of an object deletes its facets in the log too: a node that takes it over
// finds them empty, not rebuilt from their earlier records; a facet's DeleteAll does the same for
// the facets below it.
func TestClusterFacetsDeleteAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		n1 := openFacetNode(t, c, "n1")
		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		fg := foldersAt(c, "n1", nodes, 2)
		f, g := fg[0], fg[1]
		n1.writePages(t, f, 2)
		n1.writePages(t, g, 2)
		stub, _ := n1.folders.Get(f)
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) error {
			return fo.st.Storage().DeleteAll(ctx)
		}))
		require.NoError(t, n1.onPage(g, "a", "", func(ctx context.Context, p *leaf) error { return p.st.Storage().DeleteAll(ctx) }))
		require.NoError(t, n1.rt.Close())

		for _, at := range []struct{ f, pg, nt string }{{f, "a", ""}, {f, "b", ""}, {f, "a", "x"}, {g, "a", ""}, {g, "a", "x"}} {
			_, ok, err := n2.getPage(at.f, at.pg, at.nt, "k0")
			require.NoError(t, err)
			require.False(t, ok, "%v was deleted", at)
		}
		v, ok, err := n2.getPage(g, "b", "", "k1")
		require.NoError(t, err)
		require.True(t, ok, "a sibling of a deleted facet keeps its data")
		require.Equal(t, "b-v1", v)
	})
}

// S-CL7, S-CL11: a node that never read its object's facets' records (it caught its file up from
// where its last commit left it, after them) still snapshots every database: it reads the log
// first, so that trimming it loses no facet's records.
func TestClusterFacetsSnapshotByRootOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		nodes := []string{"n1", "n2"}
		every := func(o *core.Options) { o.Replication.SnapshotEvery = 20 }
		n1 := openFacetNode(t, c, "n1", every)
		f := folderAt(c, "n1", nodes)
		n1.writePages(t, f, 2)
		put := func(n *facetNode, i int) {
			stub, _ := n.folders.Get(f)
			require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, fo *binder) error {
				return fo.st.Storage().Put(ctx, "k"+strconv.Itoa(i), []byte("v"+strconv.Itoa(i)))
			}))
		}
		put(n1, 1) // the folder's file is at the log's head, after its facets' records
		require.NoError(t, n1.rt.Close())

		dir := n1.dir
		n1 = openFacetNode(t, c, "n1", every, func(o *core.Options) { o.Dir = dir })
		for i := 2; i < 16; i++ { // only the folder: a snapshot comes
			put(n1, i)
		}
		require.NotEmpty(t, c.Blobs())
		require.Equal(t, byte(logrecord.Snapshot), c.Records("folders/" + f)[0][1])
		require.NoError(t, n1.rt.Close())

		n2 := openFacetNode(t, c, "n2")
		defer n2.rt.Close()
		n2.requirePages(t, f, 2)
	})
}
