package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
	"github.com/durable-go/durable/replog"
)

// ErrRefused is a write that the target refused before it stored anything, for a reason that says
// nothing of the key's state: the node it was sent to could not serve the key (another node owns
// it, this node was fenced, or it cannot prove its lease now). Unlike a conflict it does not mean
// that the key's last record is not the one expected, so the linearizability check leaves it out;
// the final records must not hold it.
var ErrRefused = errors.New("faults: refused, nothing stored")

// ErrNodeDown is the refusal of an operation sent to a node where nothing listens (it is down, or
// not serving yet): a client waits a moment before its next operation, as one that has other
// nodes to try does not keep asking a dead one.
var ErrNodeDown = fmt.Errorf("%w: the node does not accept connections", ErrRefused)

// RuntimeTarget puts the runtime in cluster mode (package core with Options.Replication) through
// the faults. Each node process runs an embedded JetStream node and a runtime over it (the engine
// on the node's own connection, the runtime's default LeaseTTL, shorter than a SIGSTOP of the
// schedule, so that a stopped owner's objects are taken over while it is stopped; a snapshot every 200 records, objects
// evicted after 1 s idle, which hands their leases back), and serves, over HTTP on 127.0.0.1, a
// namespace of registers: an object per key holding a version and a value, and a history of every
// write. A write is a call that writes only if the version is the one expected, and returns the
// new version (the version plays the part of the log's sequence); a read returns the version and
// the value; the records at the end are the history, read through a node that owns or takes the
// object. Clients send each operation to a random node, which calls the register's method (core.Define)
// wherever the register lives: the runtime sends it to the owner (Replication.Calls), and the key
// moves to another node only when its owner fails, is stopped, is cut off, or evicts it. Every
// node also serves a namespace of rooms (package patterns/room) at /room/, for RunRoomFailover.
//
// Errors map to outcomes as follows. ErrNotOwner, ErrFenced, ErrLeaseUnproven, ErrClosed (the
// node is stopping) and ErrUnreachable (the call was delivered to no owner) are refusals
// (ErrRefused): the runtime stored nothing; so is a connection that could not be made (the node is
// down: nothing was sent). ErrCommitUnknown, any other error of the call, and any other error of
// the transport (a timeout, a broken connection) are unknown outcomes.
//
// The client is also an EpochReader: it reads the object's log through the engine and decodes each
// record's epoch (replog.RecordEpoch), which must never decrease.
type RuntimeTarget struct{}

// Name implements Target.
func (RuntimeTarget) Name() string { return "runtime" }

// registerNS is the namespace of the registers; a harness key "registers/k0" is the object "k0" in
// it, whose log key is the same string.
const registerNS = "registers"

// RunNode implements Target.
func (RuntimeTarget) RunNode(ctx context.Context, spec NodeSpec) error {
	ncfg := engineNodeConfig(spec)
	ncfg.Dir = filepath.Join(spec.Dir, "js")
	node, err := cluster.StartNode(ncfg)
	if err != nil {
		return err
	}
	defer node.Shutdown()
	nc, err := cluster.Connect([]string{node.ClientURL()})
	if err != nil {
		return err
	}
	defer nc.Close()
	// A node started while the others are down waits for them (within ctx) before it serves.
	eng, err := cluster.New(ctx, nc, engineConfig(spec))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	level, err := nodeLogLevel(spec.LogLevel)
	if err != nil {
		return err
	}
	if os.Getenv(DebugLogsEnv) != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	rt, err := core.Open(core.Options{
		Dir: filepath.Join(spec.Dir, "objects"), Logger: logger, IdleTimeout: time.Second,
		WebSocketSendQueue: roomSendQueue,
		Replication:        &core.Replication{Node: spec.Name, Log: eng, Leases: eng, Beacon: eng, Calls: eng, SnapshotEvery: 200},
	})
	if err != nil {
		return err
	}
	h, err := RegisterHandler(rt)
	if err != nil {
		rt.Close()
		return err
	}
	alarms, err := AlarmHandler(rt, spec.Name)
	if err != nil {
		rt.Close()
		return err
	}
	rooms, err := room.Register(rt, roomNS, room.Options{History: roomHistory})
	if err != nil {
		rt.Close()
		return err
	}
	h = withAlarms(alarms, withRooms(room.Handler(rooms), h))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", spec.ServePort))
	if err != nil {
		rt.Close()
		return err
	}
	var stopping atomic.Bool
	ready := func() error {
		if stopping.Load() {
			return errors.New("faults: the node is stopping")
		}
		return readiness(rt)
	}
	srv := &http.Server{Handler: statusHandler(spec.Name, node, rt, ready, h), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	// A stop asked for (SIGTERM) drains while the node still answers: the runtime shuts down,
	// handing its shards back, so that calls here are refused and go to the nodes that take the
	// shards over; the node hands its raft leaderships over (Drain); then the HTTP server stops.
	// With the engine out of reach the shards cannot be handed back, and their leases lapse.
	stopping.Store(true)
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := rt.Shutdown(dctx); err != nil {
		logger.Warn("the runtime did not close cleanly", "error", err)
	}
	if err := node.Drain(dctx); err != nil {
		logger.Warn("the node did not hand its raft leaderships over", "error", err)
	}
	cancel()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	srv.Shutdown(sctx)
	cancel()
	if serveErr == nil {
		serveErr = <-served // Serve has returned
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if err := rt.Close(); err != nil {
		logger.Warn("the runtime did not close cleanly", "error", err)
	}
	return serveErr
}

func engineConfig(spec NodeSpec) cluster.Config {
	return cluster.Config{Replicas: spec.Replicas, Shards: spec.Shards, Prefix: "faults", Timeout: 3 * time.Second}
}

// register is one key of the runtime target: its version and value, and the history of its writes.
type register struct{ st *core.State }

func newRegister(ctx context.Context, st *core.State) (*register, error) {
	_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS reg(id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS history(version INTEGER PRIMARY KEY, value TEXT NOT NULL)`)
	return &register{st}, err
}

func (r *register) read(ctx context.Context) (uint64, string, error) {
	var version uint64
	var value string
	err := r.st.Storage().QueryRow(ctx, `SELECT version, value FROM reg WHERE id = 1`).Scan(&version, &value)
	if errors.Is(err, core.ErrNoRows) {
		return 0, "", nil
	}
	return version, value, err
}

// write sets the value if the version is expect, and returns the new version, or the current one
// and conflict.
func (r *register) write(ctx context.Context, expect uint64, value string) (version uint64, conflict bool, err error) {
	cur, _, err := r.read(ctx)
	if err != nil || cur != expect {
		return cur, err == nil, err
	}
	s := r.st.Storage()
	err = s.Transaction(ctx, func() error {
		if _, err := s.Exec(ctx, `INSERT INTO reg(id, version, value) VALUES (1, ?, ?)
ON CONFLICT(id) DO UPDATE SET version = excluded.version, value = excluded.value`, expect+1, value); err != nil {
			return err
		}
		_, err := s.Exec(ctx, `INSERT INTO history(version, value) VALUES (?, ?)`, expect+1, value)
		return err
	})
	return expect + 1, false, err
}

func (r *register) records(ctx context.Context) ([]Record, error) {
	rows, err := r.st.Storage().Query(ctx, `SELECT version, value FROM history ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []Record
	for rows.Next() {
		var rec Record
		if err := rows.Scan(&rec.Seq, &rec.Value); err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, rows.Err()
}

// regReply is the body of every answer of the register handler.
type regReply struct {
	Outcome string   `json:"outcome"` // ok, conflict, refused, unknown
	Version uint64   `json:"version"` // the new version (write), the current one (conflict, read)
	Value   string   `json:"value,omitempty"`
	Records []Record `json:"records,omitempty"`
	Error   string   `json:"error,omitempty"`
	Owner   string   `json:"owner,omitempty"` // a refusal's: the node that owns the key, if known
}

// classify maps an error of a call to the runtime to the outcome a client must assume.
func classify(err error) string {
	switch {
	case errors.Is(err, core.ErrCommitUnknown):
		return "unknown"
	case errors.Is(err, core.ErrNotOwner), errors.Is(err, core.ErrFenced), errors.Is(err, core.ErrLeaseUnproven),
		errors.Is(err, core.ErrClosed), errors.Is(err, core.ErrUnreachable):
		return "refused"
	default:
		return "unknown"
	}
}

// writeArg is the argument of a register's write method.
type writeArg struct {
	Expect uint64 `json:"expect"`
	Value  string `json:"value"`
}

// RegisterHandler registers the namespace of registers in rt, with its methods (write, read,
// records: callable from any node, so that a node that does not own a register sends the call to
// the one that does), and returns the HTTP handler that serves them: POST
// /write?key=K&expect=N&value=V, GET /read?key=K, GET /records?key=K, each answered with a JSON
// regReply, and GET /health.
func RegisterHandler(rt *core.Runtime) (http.Handler, error) {
	ns, err := core.Register(rt, registerNS, newRegister)
	if err != nil {
		return nil, err
	}
	write, err := core.Define(ns, "write", func(ctx context.Context, reg *register, a writeArg) (regReply, error) {
		v, conflict, err := reg.write(ctx, a.Expect, a.Value)
		if conflict {
			return regReply{Outcome: "conflict", Version: v}, err
		}
		return regReply{Outcome: "ok", Version: v}, err
	})
	if err != nil {
		return nil, err
	}
	read, err := core.Define(ns, "read", func(ctx context.Context, reg *register, _ struct{}) (regReply, error) {
		v, val, err := reg.read(ctx)
		return regReply{Outcome: "ok", Version: v, Value: val}, err
	})
	if err != nil {
		return nil, err
	}
	records, err := core.Define(ns, "records", func(ctx context.Context, reg *register, _ struct{}) (regReply, error) {
		recs, err := reg.records(ctx)
		return regReply{Outcome: "ok", Records: recs}, err
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	serve := func(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, stub *core.Stub[*register]) (regReply, error)) {
		reply, err := func() (regReply, error) {
			stub, err := ns.Get(r.URL.Query().Get("key"))
			if err != nil {
				return regReply{}, err
			}
			return fn(r.Context(), stub)
		}()
		if err != nil {
			reply = regReply{Outcome: classify(err), Error: err.Error()}
			if noe := (*core.NotOwnerError)(nil); errors.As(err, &noe) {
				reply.Owner = noe.Holder
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(reply)
	}
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		expect, err := strconv.ParseUint(q.Get("expect"), 10, 64)
		if err != nil {
			http.Error(w, "expect: "+err.Error(), http.StatusBadRequest)
			return
		}
		serve(w, r, func(ctx context.Context, stub *core.Stub[*register]) (regReply, error) {
			return write(ctx, stub, writeArg{Expect: expect, Value: q.Get("value")})
		})
	})
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, func(ctx context.Context, stub *core.Stub[*register]) (regReply, error) {
			return read(ctx, stub, struct{}{})
		})
	})
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, func(ctx context.Context, stub *core.Stub[*register]) (regReply, error) {
			return records(ctx, stub, struct{}{})
		})
	})
	return mux, nil
}

// Dial implements Target: an HTTP client of the node's registers, and an engine on the node's
// JetStream, for the epochs of the objects' logs.
func (RuntimeTarget) Dial(ctx context.Context, spec NodeSpec) (Client, error) {
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.ServePort)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
	// The node serves once its runtime is open, after the cluster elected its leaders.
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-ctx.Done():
			hc.CloseIdleConnections()
			return nil, fmt.Errorf("faults: node %s does not serve: %w (%w)", spec.Name, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	nc, err := cluster.Connect([]string{fmt.Sprintf("nats://127.0.0.1:%d", spec.ClientPort)})
	if err != nil {
		hc.CloseIdleConnections()
		return nil, err
	}
	e, err := cluster.New(ctx, nc, engineConfig(spec))
	if err != nil {
		nc.Close()
		hc.CloseIdleConnections()
		return nil, err
	}
	return &RuntimeClient{Base: base, HTTP: hc, Log: e, closeFn: nc.Close}, nil
}

// RuntimeClient is the runtime target's client of one node: its registers over HTTP at Base, and
// Log, where the objects' logs are read for their epochs (nil: Epochs fails).
type RuntimeClient struct {
	Base    string
	HTTP    *http.Client
	Log     replog.Log
	closeFn func()
}

func (c *RuntimeClient) call(ctx context.Context, method, path string, q url.Values) (regReply, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path+"?"+q.Encode(), nil)
	if err != nil {
		return regReply{}, err
	}
	resp, err := c.HTTP.Do(req)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// Nothing was sent (the client sends a request again only if it wrote nothing of it): the
		// node is down, or not serving yet.
		return regReply{}, fmt.Errorf("%w: %v", ErrNodeDown, err)
	}
	if err != nil {
		return regReply{}, err
	}
	defer resp.Body.Close()
	var reply regReply
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return regReply{}, fmt.Errorf("faults: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return regReply{}, fmt.Errorf("faults: %s %s: the answer: %w", method, path, err)
	}
	switch reply.Outcome {
	case "ok":
		return reply, nil
	case "conflict":
		return reply, fmt.Errorf("%w: the version is %d", replog.ErrConflict, reply.Version)
	case "refused":
		return reply, fmt.Errorf("%w: %s", ErrRefused, reply.Error)
	default:
		return reply, fmt.Errorf("faults: %s %s: %s", method, path, reply.Error)
	}
}

// objectName is the register's name within its namespace for a harness key.
func objectName(key string) string { return strings.TrimPrefix(key, registerNS+"/") }

// Write implements Client: ok, a conflict (replog.ErrConflict), a refusal (ErrRefused), or an
// unknown outcome (any other error).
func (c *RuntimeClient) Write(ctx context.Context, key string, expect uint64, value string) (uint64, error) {
	reply, err := c.call(ctx, http.MethodPost, "/write", url.Values{"key": {objectName(key)}, "expect": {strconv.FormatUint(expect, 10)}, "value": {value}})
	if err != nil {
		return 0, err
	}
	return reply.Version, nil
}

// Read implements Client.
func (c *RuntimeClient) Read(ctx context.Context, key string) (uint64, string, error) {
	reply, err := c.call(ctx, http.MethodGet, "/read", url.Values{"key": {objectName(key)}})
	if err != nil {
		return 0, "", err
	}
	return reply.Version, reply.Value, nil
}

// Records implements Client: the register's history, as the node that serves the key reads it.
func (c *RuntimeClient) Records(ctx context.Context, key string) ([]Record, error) {
	reply, err := c.call(ctx, http.MethodGet, "/records", url.Values{"key": {objectName(key)}})
	if err != nil {
		return nil, err
	}
	return reply.Records, nil
}

// Epochs implements EpochReader: the epoch of each record of the key's log, in order, read
// through the engine (since the last snapshot: older records are trimmed).
func (c *RuntimeClient) Epochs(ctx context.Context, key string) ([]uint64, error) {
	if c.Log == nil {
		return nil, errors.New("faults: no log to read epochs from")
	}
	var epochs []uint64
	err := c.Log.Read(ctx, key, 0, func(seq uint64, rec []byte) error {
		e, err := replog.RecordEpoch(rec)
		if err != nil {
			return fmt.Errorf("record %d of %q: %w", seq, key, err)
		}
		epochs = append(epochs, e)
		return nil
	})
	return epochs, err
}

// Close implements Client.
func (c *RuntimeClient) Close() error {
	c.HTTP.CloseIdleConnections()
	if c.closeFn != nil {
		c.closeFn()
		c.closeFn = nil
	}
	return nil
}

// An EpochReader is a Client whose target keeps writers' epochs in a log of its own, beside the
// records Records returns (the runtime target's: each object's log in the engine). The harness
// reads it at the end and checks that epochs never decrease along it (CheckEpochs).
type EpochReader interface {
	Epochs(ctx context.Context, key string) ([]uint64, error)
}

// CheckEpochs adds to v the records of the key's log (given by their epochs, in order) whose epoch
// is lower than the one before: a writer appended after a node with a higher epoch took over.
func CheckEpochs(v *Verdict, epochs []uint64) {
	v.LogRecords += len(epochs)
	for i := 1; i < len(epochs); i++ {
		if epochs[i] < epochs[i-1] {
			v.EpochDrops++
			v.problem("record %d of the log of %q has epoch %d after epoch %d", i, v.Key, epochs[i], epochs[i-1])
		}
	}
}

// checkLogEpochs reads the key's log epochs through the first client that can (retrying within a
// deadline while the healed cluster elects its leaders) and checks them into v.
func checkLogEpochs(clients []Client, key string, v *Verdict) error {
	for _, c := range clients {
		er, ok := c.(EpochReader)
		if !ok {
			return nil
		}
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			epochs, err := er.Epochs(ctx, key)
			cancel()
			if err == nil {
				CheckEpochs(v, epochs)
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("reading the epochs of %q: %w", key, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// nodeLogLevel is the level of a node's log that Config.NodeLog names: "" is warn.
func nodeLogLevel(name string) (slog.Level, error) {
	if name == "" {
		return slog.LevelWarn, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(name)); err != nil {
		return 0, fmt.Errorf("faults: the nodes' log level %q is not debug, info, warn or error", name)
	}
	return l, nil
}
