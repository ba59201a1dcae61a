package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// facetKillEnv tells the test binary it runs as the child of TestCluster_FacetsSurviveOwnerKill:
// "url|prefix|dir".
const facetKillEnv = "DURABLE_TEST_FACET_KILL_CHILD"

// doc hosts page facets, which host note facets.
type doc struct{ st *core.State }

// sheet is a page or a note. A note's alarm says on rang what the note held when it ran.
type sheet struct {
	st   *core.State
	rang chan<- string
}

func (s *sheet) Alarm(ctx context.Context, info core.AlarmInfo) error {
	v, ok, err := s.st.Storage().Get(ctx, "armed")
	if err != nil {
		return err
	}
	if s.rang != nil {
		s.rang <- fmt.Sprintf("%s armed=%s found=%v scheduled=%d", s.st.FacetPath(), v, ok, info.Scheduled.UnixNano())
	}
	return nil
}

type docKinds struct {
	docs  *core.Namespace[*doc]
	pages *core.FacetKind[*sheet]
	notes *core.FacetKind[*sheet]
}

func registerDocs(t *testing.T, rt *core.Runtime, rang chan<- string) *docKinds {
	t.Helper()
	k := &docKinds{}
	var err error
	if k.docs, err = core.Register(rt, "docs", func(_ context.Context, st *core.State) (*doc, error) { return &doc{st: st}, nil }); err != nil {
		t.Fatal(err)
	}
	newSheet := func(_ context.Context, st *core.State) (*sheet, error) { return &sheet{st: st, rang: rang}, nil }
	if k.pages, err = core.RegisterFacet(rt, k.docs, "page", newSheet); err != nil {
		t.Fatal(err)
	}
	if k.notes, err = core.RegisterFacet(rt, k.pages, "note", newSheet); err != nil {
		t.Fatal(err)
	}
	return k
}

// onSheet runs fn on page pg of doc "d" (on its note nt if nt is not ""), from a turn of the doc that
// first runs root on the doc.
func (k *docKinds) onSheet(ctx context.Context, pg, nt string, root func(ctx context.Context, d *doc) error, fn func(ctx context.Context, s *sheet) error) error {
	stub, err := k.docs.Get("d")
	if err != nil {
		return err
	}
	return core.Do(ctx, stub, func(ctx context.Context, d *doc) error {
		if root != nil {
			if err := root(ctx, d); err != nil {
				return err
			}
		}
		ps, err := k.pages.Get(d.st, pg)
		if err != nil {
			return err
		}
		return core.Do(ctx, ps, func(ctx context.Context, p *sheet) error {
			if nt == "" {
				return fn(ctx, p)
			}
			ns, err := k.notes.Get(p.st, nt)
			if err != nil {
				return err
			}
			return core.Do(ctx, ns, fn)
		})
	})
}

// openDocsNode opens a runtime named name over JetStream at url, with the engine prefix given.
func openDocsNode(t *testing.T, url, prefix, name, dir string) (*core.Runtime, func()) {
	t.Helper()
	nc, err := cluster.Connect([]string{url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := cluster.New(ctx, nc, cluster.Config{Prefix: prefix, Replicas: 1, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := core.Open(core.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler),
		Replication: &core.Replication{Node: name, Log: e, Leases: e, Beacon: e}})
	if err != nil {
		t.Fatal(err)
	}
	return rt, func() { rt.Close(); nc.Close() }
}

// TestCluster_FacetsKillChild is the child: it arms an alarm of note x of page a, then writes the
// doc and one of its pages in one turn of the doc, again and again, printing each write once it is
// acknowledged, until it is killed.
func TestCluster_FacetsKillChild(t *testing.T) {
	env := os.Getenv(facetKillEnv)
	if env == "" {
		return // runs only as the child of TestCluster_FacetsSurviveOwnerKill
	}
	parts := strings.Split(env, "|")
	rt, _ := openDocsNode(t, parts[0], parts[1], "doomed", parts[2])
	k := registerDocs(t, rt, nil)
	ctx := context.Background()
	at := time.Now().Add(facetAlarmIn)
	if err := k.onSheet(ctx, "a", "x", nil, func(ctx context.Context, s *sheet) error {
		if err := s.st.Storage().Put(ctx, "armed", []byte(strconv.FormatInt(at.UnixNano(), 10))); err != nil {
			return err
		}
		return s.st.SetAlarm(ctx, at)
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("armed %d\n", at.UnixNano())
	for i := 0; ; i++ {
		key, value := "k"+strconv.Itoa(i), []byte("v"+strconv.Itoa(i))
		err := k.onSheet(ctx, "p"+strconv.Itoa(i%3), "", func(ctx context.Context, d *doc) error {
			return d.st.Storage().Put(ctx, "last", []byte(strconv.Itoa(i)))
		}, func(ctx context.Context, s *sheet) error { return s.st.Storage().Put(ctx, key, value) })
		if err != nil {
			fmt.Printf("error %d %v\n", i, err)
			continue
		}
		fmt.Printf("ack %d\n", i)
	}
}

// facetAlarmIn is how long after it is armed the note's alarm is due: the child is killed before.
const facetAlarmIn = 12 * time.Second

// S-CL11, S-CL9 (seed 004's shape in cluster mode): a process owning a doc whose facets write (and
// a note's alarm armed) is SIGKILLed; a runtime started afterwards on another directory takes the
// doc's shard over: every write the child had acknowledged is there, the doc's and its facets',
// and the note's alarm runs there, not before its time, finding the note's data.
func TestCluster_FacetsSurviveOwnerKill(t *testing.T) {
	c := startCluster(t, 1)
	prefix := fmt.Sprintf("t%d", prefixes.Add(1))
	cmd := exec.Command(os.Args[0], "-test.run=^TestCluster_FacetsKillChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), facetKillEnv+"="+c.url(0)+"|"+prefix+"|"+filepath.Join(t.TempDir(), "doomed"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() { once.Do(func() { cmd.Process.Kill() }) }
	defer func() { kill(); cmd.Wait() }()
	guard := time.AfterFunc(2*time.Minute, kill) // a child that never gets going
	defer guard.Stop()

	var due time.Time
	var killedAt time.Time
	acked := -1
	lines := bufio.NewScanner(out)
	var tail []string
	for lines.Scan() {
		line := lines.Text()
		tail = append(tail[max(0, len(tail)-20):], line)
		if s, ok := strings.CutPrefix(line, "armed "); ok {
			n, _ := strconv.ParseInt(s, 10, 64)
			due = time.Unix(0, n)
		} else if s, ok := strings.CutPrefix(line, "ack "); ok {
			acked, _ = strconv.Atoi(s)
		}
		// Killed after 60 acknowledged writes, or 4 s before the alarm is due, whichever comes first.
		if !due.IsZero() && (acked >= 59 || time.Until(due) < 4*time.Second) {
			kill()
			killedAt = time.Now()
			break
		}
	}
	if killedAt.IsZero() {
		t.Fatalf("the child ended before it was killed: %s", strings.Join(tail, "\n"))
	}
	if !killedAt.Before(due) {
		t.Fatalf("the child was killed %v after the alarm was due: a loaded machine; nothing shown", killedAt.Sub(due))
	}
	t.Logf("child killed after %d acknowledged writes, %v before the alarm is due", acked+1, due.Sub(killedAt).Round(time.Millisecond))

	rang := make(chan string, 4)
	rt, closeRT := openDocsNode(t, c.url(0), prefix, "survivor", t.TempDir())
	defer closeRT()
	k := registerDocs(t, rt, rang)
	select {
	case got := <-rang:
		ranAt := time.Now()
		want := fmt.Sprintf("page=a/note=x armed=%d found=true scheduled=%d", due.UnixNano(), due.UnixNano())
		if got != want {
			t.Errorf("the note's alarm ran with %q; want %q", got, want)
		}
		if ranAt.Before(due) {
			t.Errorf("the note's alarm ran %v before its time", due.Sub(ranAt))
		}
		t.Logf("the note's alarm ran at the survivor %v after its time", ranAt.Sub(due).Round(time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatal("the note's alarm did not run at the survivor within 2 minutes of the kill")
	}

	ctx := t.Context()
	for i := 0; i <= acked; i++ {
		var v []byte
		var ok bool
		err := k.onSheet(ctx, "p"+strconv.Itoa(i%3), "", nil, func(ctx context.Context, s *sheet) (err error) {
			v, ok, err = s.st.Storage().Get(ctx, "k"+strconv.Itoa(i))
			return err
		})
		if err != nil {
			t.Fatalf("read write %d: %v", i, err)
		}
		if !ok || string(v) != "v"+strconv.Itoa(i) {
			t.Errorf("acknowledged write %d: got %q (found %v), want %q", i, v, ok, "v"+strconv.Itoa(i))
		}
	}
	stub, _ := k.docs.Get("d")
	last, err := core.Call(ctx, stub, func(ctx context.Context, d *doc) (int, error) {
		v, _, err := d.st.Storage().Get(ctx, "last")
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(v))
	})
	if err != nil && !errors.Is(err, strconv.ErrSyntax) {
		t.Fatal(err)
	}
	if last < acked {
		t.Errorf("the doc's own last write is %d; want at least %d, the last acknowledged", last, acked)
	}
}
