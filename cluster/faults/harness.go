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
	"slices"
	"strings"
	"sync"
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
	Keys     int           // keys the clients write (default 6: one per client)
	Clients  int           // concurrent clients (default 6)
	StopFor  time.Duration // how long a SIGSTOP lasts (default 6 s: longer than a lease)
	// Grace is how long a fault's window lasts after the fault is healed and every node is ready
	// again (DefaultGrace); the cluster works undisturbed for Grace and 1 to 4 s more between two
	// faults.
	Grace time.Duration
	// Alarms is how many objects the alarm workload arms during the run (runtime target only; 0:
	// none; alarm_workload.go).
	Alarms int
	// CheckTimeout bounds porcupine's search per key (default 2 min).
	CheckTimeout time.Duration
	// KeepLogs keeps the node processes' logs (their stdout and stderr) in a directory the run
	// names, whether or not the test fails; they are kept anyway when it fails.
	KeepLogs bool
	// NodeLog is the level of the node processes' logs: "debug", "info", "warn" (the default) or
	// "error".
	NodeLog string
	Logf    func(format string, args ...any)
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
		cfg.Keys = 6
	}
	if cfg.Clients == 0 {
		cfg.Clients = 6
	}
	if cfg.StopFor == 0 {
		cfg.StopFor = 6 * time.Second
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 2 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	if _, err := nodeLogLevel(cfg.NodeLog); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cfg: cfg}
	root := t.TempDir()
	t.Cleanup(func() { keepLogs(t, h, cfg.KeepLogs) }) // after the nodes are reaped, before the directory goes
	t.Cleanup(h.reapAll)                               // registered after TempDir's, so it runs before the directory goes
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

	sum := &Summary{Target: cfg.Target.Name(), Nodes: cfg.Nodes, Seed: cfg.Seed, Duration: cfg.Duration, Grace: cfg.Grace}
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
	sum.Ran = h.since()

	// Heal, bring every node back, and read every key's records from one node once the cluster
	// serves again.
	h.healAll()
	if aw != nil {
		sum.Alarms = aw.finish(time.Now())
		for _, p := range slices.Concat(sum.Alarms.Problems, sum.Alarms.Slow, sum.Alarms.LateKept) {
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
		sum.count(ops)
	}
	sum.count(w.readFails)
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
			LogLevel: h.cfg.NodeLog,
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

// faults injects faults until the duration is over, one at a time, each healed before the next,
// and notes each one's window in sum.Windows: from its injection until every node is ready again
// after it was healed (Readier), the window's end; Grace later the next may come.
func (h *harness) faults(sum *Summary, r *rand.Rand) {
	n := h.cfg.Nodes
	end := time.Now().Add(h.cfg.Duration)
	pause := func(lo, hi time.Duration) { time.Sleep(lo + time.Duration(r.Int64N(int64(hi-lo)))) }
	for time.Now().Before(end) {
		// The cluster works undisturbed for a while: the last fault's grace, and more.
		pause(h.cfg.Grace+time.Second, h.cfg.Grace+4*time.Second)
		i := r.IntN(n)
		kind := r.IntN(7)
		w := Window{Start: h.since()}
		switch kind {
		case 0, 1:
			w.Fault = "SIGKILL " + h.procs[i].spec.Name
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
			h.note("kill", i)
			h.procs[i].kill()
			sum.Kills++
			pause(500*time.Millisecond, 4*time.Second)
			h.launch(h.procs[i])
		case 2:
			w.Fault = "SIGKILL every node"
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
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
			w.Fault = fmt.Sprintf("SIGSTOP %s for %v", h.procs[i].spec.Name, h.cfg.StopFor)
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
			h.note("stop", i)
			h.procs[i].stop()
			sum.Stops++
			time.Sleep(h.cfg.StopFor)
			h.procs[i].cont()
		case 4:
			w.Fault = h.procs[i].spec.Name + " cut off from the others"
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
			h.note("isolate", i)
			h.net.Isolate(i)
			sum.Partitions++
			pause(3*time.Second, 8*time.Second)
			h.net.Heal()
		case 5:
			j := (i + 1 + r.IntN(n-1)) % n
			w.Fault = fmt.Sprintf("%s no longer hears %s (one way)", h.procs[j].spec.Name, h.procs[i].spec.Name)
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
			h.note("oneway", i, j)
			h.net.Block(i, j)
			sum.OneWay++
			pause(3*time.Second, 8*time.Second)
			h.net.Heal()
		case 6:
			w.Fault = "restart " + h.procs[i].spec.Name
			h.cfg.Logf("faults: %v: %s", w.Start, w.Fault)
			h.note("restart", i)
			h.procs[i].term()
			sum.Restarts++
			h.launch(h.procs[i])
		}
		h.waitReady()
		w.End = h.since()
		h.cfg.Logf("faults: %v: healed, every node ready (%s)", w.End, w.Fault)
		sum.Windows = append(sum.Windows, w)
		sum.Cycles++
	}
}

// A Readier is a Target that says whether a node serves again (the runtime target's GET /readyz);
// after a fault is healed, the harness waits for every node to be ready before it ends the fault's
// window.
type Readier interface {
	Ready(ctx context.Context, spec NodeSpec) error
}

// waitReady waits, within a minute, until every node is ready (for a Target that is a Readier).
func (h *harness) waitReady() {
	rd, ok := h.cfg.Target.(Readier)
	if !ok {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for _, p := range h.procs {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := rd.Ready(ctx, p.spec)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				h.cfg.Logf("faults: %v: node %s is not ready a minute after the fault was healed: %v", h.since(), p.spec.Name, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
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
