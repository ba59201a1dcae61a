package core_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// Crash safety (DESIGN "Turns, gates and commits"): a caller gets its result
// only after the commit holding the turn's writes is durable (the output
// gate), and a turn's writes are atomic: after a crash at any moment, every
// write whose call returned nil is on disk, and no turn is found half
// applied or applied although it was rolled back.
//
// TestCrash runs the test binary again as a child (TestCrashChild) that
// keeps crashWriters goroutines calling a few objects in turn, each turn
// inserting a pair of rows (seq in one table, -seq in another) and the child
// printing "ack <object> <seq>" once the call has returned nil. The parent
// reads the acks from the pipe and SIGKILLs the child after a chosen number
// of them, mid-load, then opens the directory in-process and checks every
// acknowledged pair. Every tenth turn inserts its pair and then fails on
// purpose ("rollback <object> <seq>"); its rows must never be found.
//
// The kill moment of the "seeded" case comes from DURABLE_CRASH_SEED (or the
// clock); the seed is logged so that a failure can be replayed.

const (
	crashChildEnv   = "DURABLE_CRASH_CHILD"    // the child's data directory; set only in the child
	crashObjectsEnv = "DURABLE_CRASH_OBJECTS"  // how many objects the child writes to
	crashMaxOpenEnv = "DURABLE_CRASH_MAX_OPEN" // the child's Options.MaxOpenObjects
	crashSeedEnv    = "DURABLE_CRASH_SEED"     // the seed of the "seeded" kill moment
	crashNamespace  = "crash"
	crashWriters    = 16

	// crashChildLimit bounds the child's life should the parent vanish
	// without closing the child's stdin.
	crashChildLimit = 2 * time.Minute
	// crashWatchdog bounds the wait for the kill moment: a child that stops
	// acknowledging is killed and the test fails.
	crashWatchdog = 20 * time.Second
)

// errCrashPlanned fails a turn on purpose after it wrote its pair.
var errCrashPlanned = errors.New("crash: planned rollback")

// crashLedger is the object the child writes to: a pair of rows per turn.
type crashLedger struct {
	st *core.State
}

func newCrashLedger(ctx context.Context, st *core.State) (*crashLedger, error) {
	_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS crash_pos(seq INTEGER PRIMARY KEY, writer INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS crash_neg(seq INTEGER PRIMARY KEY)`)
	return &crashLedger{st: st}, err
}

// insert writes seq's pair with two statements in the same turn.
func (l *crashLedger) insert(ctx context.Context, seq int64, writer int) error {
	if _, err := l.st.Storage().Exec(ctx, "INSERT INTO crash_pos(seq, writer) VALUES (?, ?)", seq, writer); err != nil {
		return err
	}
	_, err := l.st.Storage().Exec(ctx, "INSERT INTO crash_neg(seq) VALUES (?)", -seq)
	return err
}

// crashContents is what the parent finds in one object after the crash.
type crashContents struct {
	integrity string
	pos, neg  map[int64]bool
}

func (l *crashLedger) contents(ctx context.Context) (crashContents, error) {
	c := crashContents{pos: make(map[int64]bool), neg: make(map[int64]bool)}
	if err := l.st.Storage().QueryRow(ctx, "PRAGMA integrity_check").Scan(&c.integrity); err != nil {
		return c, err
	}
	for table, set := range map[string]map[int64]bool{"crash_pos": c.pos, "crash_neg": c.neg} {
		rows, err := l.st.Storage().Query(ctx, "SELECT seq FROM "+table)
		if err != nil {
			return c, err
		}
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return c, err
			}
			set[seq] = true
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return c, err
		}
		rows.Close()
	}
	return c, nil
}

func crashObjectName(i int) string { return "obj-" + strconv.Itoa(i) }

// TestCrashChild is the child's side of TestCrash; it does nothing unless
// DURABLE_CRASH_CHILD is set. It never returns: it writes until it is
// killed, its stdin closes (the parent is gone) or crashChildLimit passes.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		return
	}
	var outMu sync.Mutex // serializes the lines on stdout
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...) // one write(2) per line: os.Stdout is unbuffered
	}
	die := func(format string, args ...any) {
		say("fail "+format, args...)
		os.Exit(1)
	}

	env := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			die("%s: %v", name, err)
		}
		return n
	}
	objects := env(crashObjectsEnv)
	rt, err := core.Open(core.Options{Dir: dir, MaxOpenObjects: env(crashMaxOpenEnv)})
	if err != nil {
		die("open: %v", err)
	}
	ns, err := core.Register(rt, crashNamespace, newCrashLedger)
	if err != nil {
		die("register: %v", err)
	}
	stubs := make([]*core.Stub[*crashLedger], objects)
	for i := range stubs {
		if stubs[i], err = ns.Get(crashObjectName(i)); err != nil {
			die("get: %v", err)
		}
	}

	var next, evictions atomic.Int64
	for w := range crashWriters {
		go func() {
			for i := 0; ; i++ {
				stub := stubs[(w+5*i)%objects] // every writer visits every object
				seq := next.Add(1)
				planned := seq%10 == 7
				err := core.Do(context.Background(), stub, func(ctx context.Context, l *crashLedger) error {
					if err := l.insert(ctx, seq, w); err != nil {
						return err
					}
					if planned {
						return errCrashPlanned
					}
					return nil
				})
				switch {
				case !planned && err == nil:
					say("ack %s %d", stub.Name(), seq)
					if e := rt.Stats().Evictions; e > evictions.Load() {
						evictions.Store(e) // a racy maximum is enough for a report
						say("evictions %d", e)
					}
				case planned && errors.Is(err, errCrashPlanned):
					say("rollback %s %d", stub.Name(), seq)
				default:
					die("writer %d: %s seq %d (planned failure %v): %v", w, stub.Name(), seq, planned, err)
				}
			}
		}()
	}

	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent closes the pipe or dies
		close(gone)
	}()
	select {
	case <-gone:
	case <-time.After(crashChildLimit):
	}
	os.Exit(2) // no clean shutdown: a child is only ever meant to be killed
}

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test spawns child processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, crashSeedEnv)
	}
	t.Logf("%s=%d", crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	tests := []struct {
		name string
		load crashLoad
	}{
		{"acks=1", crashLoad{killAt: 1, objects: 4}},
		{"acks=50", crashLoad{killAt: 50, objects: 4}},
		{"acks=300", crashLoad{killAt: 300, objects: 4}},
		{"acks=1000", crashLoad{killAt: 1000, objects: 4}},
		{"seeded", crashLoad{killAt: 1 + rng.IntN(1500), objects: 4}},
		// Many objects over few open databases: objects are evicted (their
		// databases closed) and reactivated (reopened) all along.
		{"evicting,acks=500", crashLoad{killAt: 500, objects: 64, maxOpen: 8, wantEvictions: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { crashRun(t, tt.load) })
	}
}

// crashLoad describes one crash: the child's load and the kill moment.
type crashLoad struct {
	killAt        int  // acks read before the SIGKILL
	objects       int  // objects written to
	maxOpen       int  // the child's Options.MaxOpenObjects; 0 for the default
	wantEvictions bool // the load is meant to evict objects before the kill
}

// crashRun starts a child on a fresh directory, kills it after load.killAt
// acks, and checks what survived.
func crashRun(t *testing.T, load crashLoad) {
	killAt := load.killAt
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(),
		crashChildEnv+"="+dir,
		crashObjectsEnv+"="+strconv.Itoa(load.objects),
		crashMaxOpenEnv+"="+strconv.Itoa(load.maxOpen))
	var stderr bytes.Buffer // written by exec's copier, read only after Wait
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var waited bool
	t.Cleanup(func() { // the child never outlives the test, whatever happens
		if !waited {
			_ = cmd.Process.Kill()
			_ = stdin.Close()
			_ = cmd.Wait()
		}
	})
	var stalled atomic.Bool
	watchdog := time.AfterFunc(crashWatchdog, func() {
		stalled.Store(true)
		_ = cmd.Process.Kill()
	})
	defer watchdog.Stop()

	// Read every line the child wrote, including those written between the
	// kill decision and its death: each "ack" is a call that returned nil.
	acked := make(map[string][]int64)  // by object
	rolled := make(map[string][]int64) // by object
	owner := make(map[int64]string)    // object of every seq reported
	acks, killedAfter, evictions := 0, 0, 0
	var childFail []string
	r := bufio.NewReader(stdout)
	start := time.Now()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // EOF; a fragment without its newline is dropped (never expected: one write per line)
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && (f[0] == "ack" || f[0] == "rollback"):
			seq, err := strconv.ParseInt(f[2], 10, 64)
			require.NoError(t, err, "child line %q", line)
			owner[seq] = f[1]
			if f[0] == "rollback" {
				rolled[f[1]] = append(rolled[f[1]], seq)
				continue
			}
			acked[f[1]] = append(acked[f[1]], seq)
			acks++
			if killedAfter == 0 && acks >= killAt {
				require.NoError(t, cmd.Process.Kill()) // SIGKILL, mid-load
				killedAfter = acks
			}
		case len(f) == 2 && f[0] == "evictions":
			if killedAfter == 0 { // count only what happened before the kill
				evictions, err = strconv.Atoi(f[1])
				require.NoError(t, err, "child line %q", line)
			}
		case len(f) > 0 && f[0] == "fail":
			childFail = append(childFail, strings.TrimSpace(line))
		}
	}
	elapsed := time.Since(start)
	_ = stdin.Close()
	waitErr := cmd.Wait()
	waited = true
	watchdog.Stop()

	require.Empty(t, childFail, "child reported failures; stderr:\n%s", stderr.String())
	require.False(t, stalled.Load(), "child stalled: %d acks in %v, kill planned at %d; stderr:\n%s", acks, crashWatchdog, killAt, stderr.String())
	require.NotZero(t, killedAfter, "child exited after %d acks, before the kill at %d: %v; stderr:\n%s", acks, killAt, waitErr, stderr.String())
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child did not die of SIGKILL: %v; stderr:\n%s", waitErr, stderr.String())
	require.NotContains(t, stderr.String(), "DATA RACE", "child stderr:\n%s", stderr.String())
	nRolled := 0
	for _, s := range rolled {
		nRolled += len(s)
	}
	t.Logf("killed after ack %d (planned %d) at %v, %d evictions before; %d acks and %d planned rollbacks read in all",
		killedAfter, killAt, elapsed.Round(time.Millisecond), evictions, acks, nRolled)
	if load.wantEvictions {
		require.NotZero(t, evictions, "no object was evicted before the kill: this case no longer tests crashes amid evictions")
	}

	// Restart on the crashed directory, in-process.
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err, "open after crash")
	t.Cleanup(func() { rt.Close() })
	ns, err := core.Register(rt, crashNamespace, newCrashLedger)
	require.NoError(t, err, "register after crash")

	ctx := context.Background()
	unacked := 0
	for i := range load.objects {
		name := crashObjectName(i)
		stub, err := ns.Get(name)
		require.NoError(t, err)
		c, err := core.Call(ctx, stub, func(ctx context.Context, l *crashLedger) (crashContents, error) { return l.contents(ctx) })
		require.NoError(t, err, "%s: read after crash", name)
		require.Equal(t, "ok", c.integrity, "%s: PRAGMA integrity_check", name)

		var lost, half, resurrected, stray []int64
		for _, seq := range acked[name] {
			if !c.pos[seq] || !c.neg[-seq] {
				lost = append(lost, seq)
			}
		}
		for seq := range c.pos {
			if !c.neg[-seq] {
				half = append(half, seq)
			}
			if owner[seq] != "" && owner[seq] != name {
				stray = append(stray, seq)
			}
		}
		for neg := range c.neg {
			if !c.pos[-neg] {
				half = append(half, -neg)
			}
		}
		for _, seq := range rolled[name] {
			if c.pos[seq] || c.neg[-seq] {
				resurrected = append(resurrected, seq)
			}
		}
		unacked += len(c.pos) - len(acked[name])
		if len(lost) > 0 {
			t.Errorf("%s: %d of %d acknowledged writes lost after SIGKILL at ack %d: %s",
				name, len(lost), len(acked[name]), killedAfter, crashSeqs(lost))
		}
		if len(half) > 0 {
			t.Errorf("%s: %d turns half applied (one row of the pair without the other): %s", name, len(half), crashSeqs(half))
		}
		if len(resurrected) > 0 {
			t.Errorf("%s: %d rolled-back turns found on disk: %s", name, len(resurrected), crashSeqs(resurrected))
		}
		if len(stray) > 0 {
			t.Errorf("%s: %d rows written through another object: %s", name, len(stray), crashSeqs(stray))
		}

		// The object still takes writes and reads them back.
		const probe = int64(1) << 40
		n, err := core.Call(ctx, stub, func(ctx context.Context, l *crashLedger) (int, error) {
			if err := l.insert(ctx, probe, -1); err != nil {
				return 0, err
			}
			var n int
			err := l.st.Storage().QueryRow(ctx, "SELECT count(*) FROM crash_pos").Scan(&n)
			return n, err
		})
		require.NoError(t, err, "%s: write after crash", name)
		require.Equal(t, len(c.pos)+1, n, "%s: rows after the probe write", name)
	}
	t.Logf("%d committed turns had not been acknowledged yet (allowed)", unacked)
	require.NoError(t, rt.Close())
}

// crashSeqs formats a few sequence numbers for a failure message.
func crashSeqs(seqs []int64) string {
	slices.Sort(seqs)
	const show = 20
	if len(seqs) > show {
		return fmt.Sprint(seqs[:show]) + fmt.Sprintf(" ... (%d more)", len(seqs)-show)
	}
	return fmt.Sprint(seqs)
}
