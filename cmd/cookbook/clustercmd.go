package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/durable-go/durable/internal/loopback"
)

// stopGrace is how long the cluster command waits for its nodes after
// SIGTERM before it kills them: a node's own shutdown takes up to
// shutdownGrace, then drainGrace to hand its raft leaderships over.
const stopGrace = shutdownGrace + drainGrace + 5*time.Second

// clusterCommand runs the subcommand cluster: a cluster of node
// processes on 127.0.0.1, each this binary's serve -node, until ctx is
// done; then it stops them (SIGTERM, then SIGKILL after stopGrace) and
// waits for them. It restarts nothing: a node that exits is reported,
// with the command that starts it again.
func clusterCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cookbook cluster", flag.ContinueOnError)
	n := fs.Int("nodes", 3, "how many node processes (3 to 9; a majority must run)")
	data := fs.String("data", "", "the cluster's directory: each node's data directory (n1, n2, ...) and JetStream directory (n1.jetstream, ...); default: a new directory in the system's temporary directory")
	lease := fs.Duration("lease", time.Second, "each node's -lease: how long a shard's lease lasts unrenewed (failover takes about this long)")
	shards := fs.Int("shards", 16, "each node's -shards: the streams the objects' logs are spread over, for the life of the data")
	fast := fs.Bool("fast", envBool("COOKBOOK_FAST"), "each node's -fast: the short retry ladder of failed alarms")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *n < 3 || *n > 9 {
		fmt.Fprintf(stderr, "-nodes %d: want 3 to 9\n", *n)
		printUsage(fs, stderr)
		return usageError{fmt.Errorf("cluster: -nodes %d: want 3 to 9", *n)}
	}
	root := *data
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "durable-cluster-"); err != nil {
			return fmt.Errorf("cookbook: cluster: %w", err)
		}
	} else if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("cookbook: cluster: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cookbook: cluster: find this program to start its nodes: %w", err)
	}
	ports, err := loopback.FreePorts(3 * *n)
	if err != nil {
		return fmt.Errorf("cookbook: cluster: find free ports: %w", err)
	}
	routes := make([]string, *n)
	for i := range routes {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[2**n+i])
	}
	out := &lineWriter{w: stdout}
	errOut := &lineWriter{w: stderr}
	if stderr == stdout {
		errOut = out
	}
	c := &clusterRun{out: out}
	for i := range *n {
		name := fmt.Sprintf("n%d", i+1)
		node := &clusterNode{name: name, dir: filepath.Join(root, name), http: fmt.Sprintf("127.0.0.1:%d", ports[i])}
		node.args = []string{"serve", "-banner=false", "-addr", node.http, "-data", node.dir, "-node", name,
			"-nats-port", strconv.Itoa(ports[*n+i]), "-cluster-port", strconv.Itoa(ports[2**n+i]),
			"-routes", strings.Join(routes, ","), "-lease", lease.String(), "-shards", strconv.Itoa(*shards)}
		if *fast {
			node.args = append(node.args, "-fast")
		}
		c.nodes = append(c.nodes, node)
	}
	start := time.Now()
	for _, node := range c.nodes {
		if err := c.launch(exe, node, out, errOut); err != nil {
			c.stop()
			return err
		}
	}
	c.printTable(root)
	err = c.waitReady(ctx, start)
	if err == nil {
		c.printTry()
		select {
		case <-ctx.Done():
		case <-c.allExited():
			err = errors.New("cookbook: cluster: every node exited")
		}
	}
	c.stop()
	return err
}

// clusterRun is the cluster command's node processes.
type clusterRun struct {
	out   *lineWriter
	nodes []*clusterNode

	mu       sync.Mutex // protects stopping
	stopping bool       // the command stops its nodes: their exits are expected
}

// clusterNode is one node process.
type clusterNode struct {
	name, dir, http string
	args            []string // after the program's name
	cmd             *exec.Cmd
	done            chan struct{} // closed once the process has exited and been waited for
}

// launch starts node's process, its output prefixed with its name, and a
// goroutine that waits for it and reports its exit (c.stop waits for it).
func (c *clusterRun) launch(exe string, node *clusterNode, out, errOut *lineWriter) error {
	cmd := exec.Command(exe, node.args...)
	stdout, stderr := out.prefixed(node.name), errOut.prefixed(node.name)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = nodeProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cookbook: cluster: start node %s: %w", node.name, err)
	}
	node.cmd, node.done = cmd, make(chan struct{})
	go func() {
		defer close(node.done)
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		c.mu.Lock()
		expected := c.stopping
		c.mu.Unlock()
		if !expected {
			c.out.printf("cluster: node %s (pid %d) exited: %v; not restarted. To start it again, with its data:\n  %s\n",
				node.name, cmd.Process.Pid, exitText(err), shellLine(append([]string{exe}, node.args...)))
		}
	}()
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// shellLine quotes a command line for a POSIX shell.
func shellLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@+") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func (c *clusterRun) printTable(root string) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\thttp\tpid\tdata\n")
	for _, node := range c.nodes {
		fmt.Fprintf(tw, "%s\thttp://%s/\t%d\t%s\n", node.name, node.http, node.cmd.Process.Pid, node.dir)
	}
	tw.Flush()
	c.out.printf("cluster: %d node processes on 127.0.0.1, in %s; each waits for a majority of them\n%s", len(c.nodes), root, b.String())
}

// waitReady waits until every node answers GET /readyz with 200 (or has
// exited), saying when each is, and when all are.
func (c *clusterRun) waitReady(ctx context.Context, start time.Time) error {
	client := &http.Client{Timeout: time.Second}
	pending := map[*clusterNode]bool{}
	for _, node := range c.nodes {
		pending[node] = true
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	ready := 0
	for len(pending) > 0 {
		for node := range pending {
			select {
			case <-node.done:
				delete(pending, node)
				continue
			default:
			}
			if readyz(ctx, client, node.http) {
				delete(pending, node)
				ready++
				c.out.printf("cluster: node %s ready after %.1fs\n", node.name, time.Since(start).Seconds())
			}
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the nodes are stopped
		case <-tick.C:
		}
	}
	if ready == 0 {
		return errors.New("cookbook: cluster: every node exited before it was ready")
	}
	c.out.printf("cluster: %d of %d nodes ready after %.1fs\n", ready, len(c.nodes), time.Since(start).Seconds())
	return nil
}

func readyz(ctx context.Context, client *http.Client, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *clusterRun) printTry() {
	n1, n2 := c.nodes[0], c.nodes[1]
	lines := [][2]string{
		{fmt.Sprintf(`curl -s "http://%s/session/touch?id=s1&key=user&value=ada"`, n1.http), n1.name + " owns s1's shard now"},
		{fmt.Sprintf(`curl -s "http://%s/session/get?id=s1&key=user"`, n2.http), "200: " + n2.name + " sends the call to " + n1.name + ", which answers"},
		{fmt.Sprintf(`curl -s "http://%s/api/cluster"`, n2.http), "the members, and which node owns each shard"},
		{fmt.Sprintf("kill -KILL %d", n1.cmd.Process.Pid), n1.name + " dies; within seconds another node serves s1"},
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s   # %s\n", width, l[0], l[1])
	}
	c.out.printf("cluster: try\n%s  open http://%s/ to watch the shards move (the page's cluster panel)\nCtrl-C stops every node.\n", b.String(), n2.http)
}

// allExited returns a channel closed once every node has exited.
func (c *clusterRun) allExited() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, node := range c.nodes {
			<-node.done
		}
		close(ch)
	}()
	return ch
}

// stop sends SIGTERM to every node still running, waits up to stopGrace
// for them to drain and exit, kills those that have not, and waits for
// every node's process to be reaped.
func (c *clusterRun) stop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	var running []*clusterNode
	for _, node := range c.nodes {
		if node.cmd == nil {
			continue
		}
		select {
		case <-node.done:
		default:
			running = append(running, node)
		}
	}
	if len(running) == 0 {
		return
	}
	c.out.printf("cluster: stopping %d nodes (SIGTERM: each drains; SIGKILL after %v)\n", len(running), stopGrace)
	for _, node := range running {
		node.cmd.Process.Signal(syscall.SIGTERM)
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	for _, node := range running {
		select {
		case <-node.done:
		case <-grace.C:
			for _, node := range running {
				node.cmd.Process.Kill() // an error means it has exited already
			}
			<-node.done
		}
	}
	for _, node := range running {
		<-node.done
	}
	c.out.printf("cluster: every node stopped\n")
}

// lineWriter writes whole lines to w, one writer at a time, so that the
// nodes' lines do not interleave within a line.
type lineWriter struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}

// prefixed returns a writer that writes each line given to it to l,
// prefixed with the node's name. exec.Cmd copies a process's output to it
// from one goroutine, and Wait returns once all is written.
func (l *lineWriter) prefixed(name string) *prefixWriter {
	return &prefixWriter{l: l, prefix: []byte(fmt.Sprintf("%-3s | ", name))}
}

type prefixWriter struct {
	l       *lineWriter
	prefix  []byte
	partial []byte // a line not ended yet
}

// maxLine bounds a line held back for its end: a longer one is written in
// parts.
const maxLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.partial = append(p.partial, b...)
	var lines []byte
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 && len(p.partial) < maxLine {
			break
		}
		if i < 0 {
			i = len(p.partial) - 1
		}
		lines = append(append(lines, p.prefix...), p.partial[:i+1]...)
		if p.partial[i] != '\n' {
			lines = append(lines, '\n')
		}
		p.partial = p.partial[i+1:]
	}
	p.partial = append([]byte(nil), p.partial...)
	if len(lines) > 0 {
		p.l.mu.Lock()
		defer p.l.mu.Unlock()
		if _, err := p.l.w.Write(lines); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// flush writes a last line that did not end.
func (p *prefixWriter) flush() {
	if len(p.partial) > 0 {
		p.Write([]byte{'\n'})
	}
}
