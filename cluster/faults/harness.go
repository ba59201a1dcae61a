package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-go/durable/internal/loopback"
)

// Config configures a run of the harness.
type Config struct {
	Target   Target
	Nodes    int           // node processes (3 or 5)
	Replicas int           // replicas of every stream (default 3)
	Shards   int           // streams the log is spread over (default 4)
	Duration time.Duration // how long faults are injected
	Seed     uint64        // the fault schedule's and the clients' seed
	Keys     int           // keys the clients write (default 3)
	Clients  int           // concurrent clients (default 6)
	StopFor  time.Duration // how long a SIGSTOP lasts (default 6 s: longer than a lease)
	// Alarms is how many objects the alarm workload arms during the run (runtime target only; 0:
	// none; alarm_workload.go).
	Alarms int
	// CheckTimeout bounds porcupine's search per key (default 2 min).
	CheckTimeout time.Duration
	Logf         func(format string, args ...any)
}

// Summary is what a run found.
type Summary struct {
	Target                                        string
	Nodes                                         int
	Seed                                          uint64
	Duration                                      time.Duration
	Cycles, Kills, KillAlls, Stops, Restarts      int
	Partitions, OneWay                            int
	Ops, Writes, Acked, Conflicts, Unknown, Reads int
	Refused, LogRecords                           int
	Lost, Phantoms, EpochDrops                    int
	Verdicts                                      []*Verdict
	Alarms                                        *AlarmSummary // nil without Config.Alarms
}

// OK reports whether every key passed every checker.
func (s *Summary) OK() bool {
	for _, v := range s.Verdicts {
		if !v.OK() {
			return false
		}
	}
	return len(s.Verdicts) > 0
}

// String is the summary line.
func (s *Summary) String() string {
	var ps []string
	for _, v := range s.Verdicts {
		ps = append(ps, fmt.Sprintf("%s=%s", v.Key, v.Porcupine))
	}
	return fmt.Sprintf("faults: target=%s nodes=%d seed=%d duration=%v cycles=%d kills=%d killalls=%d stops=%d restarts=%d partitions=%d oneway=%d ops=%d writes=%d acked=%d conflicts=%d unknown=%d refused=%d reads=%d acked-checked=%d lost=%d phantoms=%d log-records=%d epoch-drops=%d porcupine: %s",
		s.Target, s.Nodes, s.Seed, s.Duration, s.Cycles, s.Kills, s.KillAlls, s.Stops, s.Restarts, s.Partitions, s.OneWay,
		s.Ops, s.Writes, s.Acked, s.Conflicts, s.Unknown, s.Refused, s.Reads, s.Acked, s.Lost, s.Phantoms, s.LogRecords, s.EpochDrops, strings.Join(ps, " "))
}

// proc is one node process, restarted with the same spec.
type proc struct {
	spec    NodeSpec
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool
}

// cluster is the harness's set of node processes and the links between them.
type harness struct {
	t      testing.TB
	cfg    Config
	net    *Net
	procs  []*proc
	start  time.Time
	events []faultEvent // the faults, as they began
}

// Run starts cfg.Nodes node processes of cfg.Target, injects faults from a schedule seeded with
// cfg.Seed for cfg.Duration while clients write and read, heals everything, reads every key's
// records and checks them. Every node process is killed and reaped when the test ends, however it
// ends.
func Run(t testing.TB, cfg Config) *Summary {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = min(3, cfg.Nodes)
	}
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	if cfg.Keys == 0 {
		cfg.Keys = 3
	}
	if cfg.Clients == 0 {
		cfg.Clients = 6
	}
	if cfg.StopFor == 0 {
		cfg.StopFor = 6 * time.Second
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 2 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	h := &harness{t: t, cfg: cfg}
	root := t.TempDir()
	t.Cleanup(h.reapAll) // registered after TempDir's, so it runs before the directory goes
	h.setup(root)

	ctx := context.Background()
	clients := make([]Client, cfg.Nodes)
	for i, p := range h.procs {
		dctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		c, err := cfg.Target.Dial(dctx, p.spec)
		cancel()
		if err != nil {
			t.Fatalf("faults: dial node %s: %v", p.spec.Name, err)
		}
		clients[i] = c
		defer c.Close()
	}

	sum := &Summary{Target: cfg.Target.Name(), Nodes: cfg.Nodes, Seed: cfg.Seed, Duration: cfg.Duration}
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("registers/k%d", i)
	}
	h.start = time.Now()
	w := &workload{h: h, clients: clients, keys: keys, ops: make(map[string][]Op)}
	wctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() { w.client(wctx, c, rand.New(rand.NewPCG(cfg.Seed, uint64(c+1)))) })
	}
	aw := startAlarms(h, clients, cfg.Seed)
	h.faults(sum, rand.New(rand.NewPCG(cfg.Seed, 0)))
	stopClients()
	wg.Wait()

	// Heal, bring every node back, and read every key's records from one node once the cluster
	// serves again.
	h.healAll()
	if aw != nil {
		sum.Alarms = aw.finish(time.Now())
		for _, p := range append(sum.Alarms.Problems, sum.Alarms.Slow...) {
			cfg.Logf("faults: %s", p)
		}
	}
	for _, key := range keys {
		final, err := h.finalRecords(clients, key)
		if err != nil {
			t.Fatalf("faults: reading the records of %q after healing: %v", key, err)
		}
		v := Check(key, w.ops[key], final, cfg.CheckTimeout)
		if err := checkLogEpochs(clients, key, v); err != nil {
			t.Fatalf("faults: %v", err)
		}
		sum.LogRecords += v.LogRecords
		sum.Verdicts = append(sum.Verdicts, v)
		sum.Lost += v.Lost
		sum.Phantoms += v.Phantoms
		sum.EpochDrops += v.EpochDrops
		for _, p := range v.Problems {
			cfg.Logf("faults: %s", p)
		}
		if !v.OK() {
			path := filepath.Join(os.TempDir(), fmt.Sprintf("faults-%d-%s.html", cfg.Seed, strings.ReplaceAll(key, "/", "_")))
			if err := v.Visualize(path); err == nil {
				cfg.Logf("faults: the history of %q is drawn in %s", key, path)
			}
			dump := strings.TrimSuffix(path, ".html") + ".json"
			if b, err := json.Marshal(map[string]any{"ops": w.ops[key], "final": final}); err == nil && os.WriteFile(dump, b, 0o600) == nil {
				cfg.Logf("faults: its operations and final records are in %s", dump)
			}
		}
	}
	for _, c := range clients {
		c.Close()
	}
	h.reapAll()
	for _, ops := range w.ops {
		for _, op := range ops {
			sum.Ops++
			if !op.Write {
				sum.Reads++
				continue
			}
			sum.Writes++
			switch op.Out {
			case OK:
				sum.Acked++
			case Conflict:
				sum.Conflicts++
			case Refused:
				sum.Refused++
			default:
				sum.Unknown++
			}
		}
	}
	return sum
}

func (h *harness) setup(root string) {
	n := h.cfg.Nodes
	ports, err := loopback.FreePorts(3*n + n*n)
	if err != nil {
		h.t.Fatalf("faults: ports: %v", err)
	}
	clusterAddr := make([]string, n)
	listen := make([][]string, n)
	for i := range n {
		clusterAddr[i] = fmt.Sprintf("127.0.0.1:%d", ports[n+i])
		listen[i] = make([]string, n)
		for j := range n {
			listen[i][j] = fmt.Sprintf("127.0.0.1:%d", ports[3*n+i*n+j])
		}
	}
	if h.net, err = NewNet(listen, clusterAddr); err != nil {
		h.t.Fatalf("faults: links: %v", err)
	}
	for i := range n {
		spec := NodeSpec{
			Target: h.cfg.Target.Name(), Index: i, Name: fmt.Sprintf("n%d", i+1),
			Dir: filepath.Join(root, fmt.Sprintf("n%d", i+1)), ClientPort: ports[i], ClusterPort: ports[n+i],
			Routes: h.net.Routes(i), Replicas: h.cfg.Replicas, Shards: h.cfg.Shards, ServePort: ports[2*n+i],
		}
		if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
			h.t.Fatal(err)
		}
		h.procs = append(h.procs, &proc{spec: spec, logPath: filepath.Join(root, spec.Name+".log")})
	}
	for _, p := range h.procs {
		h.launch(p)
	}
}

// launch starts p's process: the test binary again, told by the environment to be a node.
func (h *harness) launch(p *proc) {
	raw, _ := json.Marshal(p.spec)
	exe, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the harness dies, so do its nodes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		h.t.Fatalf("faults: start node %s: %v", p.spec.Name, err)
	}
	p.cmd, p.done, p.stopped = cmd, make(chan struct{}), false
	done := p.done
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	// Wait, within a deadline, until the node accepts connections.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.spec.ClientPort), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			h.t.Fatalf("faults: node %s exited at start (its log: %s)", p.spec.Name, p.logPath)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("faults: node %s does not accept connections after 30 s (its log: %s)", p.spec.Name, p.logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and reaps the process.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term asks the node to stop (SIGTERM) and reaps it, killing it if it has not stopped in 20 s.
func (p *proc) term() {
	if !p.running() {
		return
	}
	if p.stopped {
		p.cont()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

func (p *proc) stop() {
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGSTOP)
		p.stopped = true
	}
}

func (p *proc) cont() {
	if p.running() && p.stopped {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.stopped = false
}

func (h *harness) reapAll() {
	for _, p := range h.procs {
		if p.running() {
			p.cont()
			p.kill()
		}
	}
	if h.net != nil {
		h.net.Close()
	}
}

// healAll opens every link, continues every stopped node and restarts every dead one.
func (h *harness) healAll() {
	h.net.Heal()
	for _, p := range h.procs {
		p.cont()
		if !p.running() {
			h.launch(p)
		}
	}
}

// faults injects faults until the duration is over, one at a time, each healed before the next.
func (h *harness) faults(sum *Summary, r *rand.Rand) {
	n := h.cfg.Nodes
	end := time.Now().Add(h.cfg.Duration)
	pause := func(lo, hi time.Duration) { time.Sleep(lo + time.Duration(r.Int64N(int64(hi-lo)))) }
	for time.Now().Before(end) {
		pause(time.Second, 3*time.Second) // the cluster works undisturbed for a while
		i := r.IntN(n)
		kind := r.IntN(7)
		switch kind {
		case 0, 1:
			h.cfg.Logf("faults: %v: SIGKILL %s", h.since(), h.procs[i].spec.Name)
			h.note("kill", i)
			h.procs[i].kill()
			sum.Kills++
			pause(500*time.Millisecond, 4*time.Second)
			h.launch(h.procs[i])
		case 2:
			h.cfg.Logf("faults: %v: SIGKILL every node", h.since())
			h.note("killall")
			for _, p := range h.procs {
				p.kill()
			}
			sum.KillAlls++
			pause(200*time.Millisecond, 2*time.Second)
			for _, p := range h.procs {
				h.launch(p)
			}
		case 3:
			h.cfg.Logf("faults: %v: SIGSTOP %s for %v", h.since(), h.procs[i].spec.Name, h.cfg.StopFor)
			h.note("stop", i)
			h.procs[i].stop()
			sum.Stops++
			time.Sleep(h.cfg.StopFor)
			h.procs[i].cont()
		case 4:
			h.cfg.Logf("faults: %v: %s cut off from the others", h.since(), h.procs[i].spec.Name)
			h.note("isolate", i)
			h.net.Isolate(i)
			sum.Partitions++
			pause(3*time.Second, 8*time.Second)
			h.net.Heal()
		case 5:
			j := (i + 1 + r.IntN(n-1)) % n
			h.cfg.Logf("faults: %v: %s no longer hears %s (one way)", h.since(), h.procs[j].spec.Name, h.procs[i].spec.Name)
			h.note("oneway", i, j)
			h.net.Block(i, j)
			sum.OneWay++
			pause(3*time.Second, 8*time.Second)
			h.net.Heal()
		case 6:
			h.cfg.Logf("faults: %v: restart %s", h.since(), h.procs[i].spec.Name)
			h.note("restart", i)
			h.procs[i].term()
			sum.Restarts++
			h.launch(h.procs[i])
		}
		sum.Cycles++
	}
}

func (h *harness) since() time.Duration { return time.Since(h.start).Round(time.Millisecond) }

// finalRecords reads key's records through every node (polling, within a deadline, while the
// healed cluster elects its leaders), and fails if two nodes read different records.
func (h *harness) finalRecords(clients []Client, key string) ([]Record, error) {
	var first []Record
	for i, c := range clients {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			recs, err := c.Records(ctx, key)
			cancel()
			if err == nil {
				if i == 0 {
					first = recs
				} else if fmt.Sprint(recs) != fmt.Sprint(first) {
					return nil, fmt.Errorf("node %s reads %d records, node %s %d, not the same", h.procs[i].spec.Name, len(recs), h.procs[0].spec.Name, len(first))
				}
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("node %s: %w", h.procs[i].spec.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return first, nil
}

// workload is the clients' side: concurrent writes with expected sequences and reads of the last
// record, on a few keys, through random nodes, every one recorded.
type workload struct {
	h       *harness
	clients []Client
	keys    []string

	mu    sync.Mutex
	ops   map[string][]Op
	hint  sync.Map // key -> *atomic.Uint64: the last sequence a client saw
	count atomic.Int64
}

func (w *workload) hintOf(key string) *atomic.Uint64 {
	v, _ := w.hint.LoadOrStore(key, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

func (w *workload) record(key string, op Op) {
	w.mu.Lock()
	w.ops[key] = append(w.ops[key], op)
	w.mu.Unlock()
}

func (w *workload) client(ctx context.Context, id int, r *rand.Rand) {
	n := 0
	for ctx.Err() == nil {
		key := w.keys[r.IntN(len(w.keys))]
		node := r.IntN(len(w.clients))
		c := w.clients[node]
		octx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if r.IntN(10) < 7 {
			n++
			value := fmt.Sprintf("c%d-%d", id, n)
			expect := w.hintOf(key).Load()
			call := time.Since(w.h.start)
			seq, err := c.Write(octx, key, expect, value)
			ret := time.Since(w.h.start)
			out := outcome(err)
			if out == OK {
				w.hintOf(key).Store(seq)
			}
			op := Op{Client: id, Node: node, Write: true, Expect: expect, Value: value, Seq: seq, Out: out, Call: call, Return: ret}
			if err != nil {
				op.Err = err.Error()
			}
			w.record(key, op)
			if out != OK {
				// Learn where the key is now, as a writer that lost a race does.
				if seq, _, err := c.Read(octx, key); err == nil {
					w.hintOf(key).Store(seq)
				}
			}
		} else {
			call := time.Since(w.h.start)
			seq, val, err := c.Read(octx, key)
			ret := time.Since(w.h.start)
			if err == nil {
				w.record(key, Op{Client: id, Node: node, Seq: seq, Value: val, Out: OK, Call: call, Return: ret})
				w.hintOf(key).Store(seq)
			}
		}
		cancel()
		w.count.Add(1)
		time.Sleep(time.Duration(2+r.IntN(8)) * time.Millisecond)
	}
}
