package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/core"
)

// The alarm workload (Config.Alarms, runtime target only). Each node process registers a namespace
// of beepers: an object whose alarm, when it runs, appends a row (the time it was set for, the time
// it ran by the running node's clock, and that node's name) to a table of its own, in the alarm's
// turn, so that a run is recorded exactly when it is durable. During the faults the harness arms
// one alarm on each of Config.Alarms beepers, spread over the run and over the shards, each due 4
// to 12 s after it is armed, through random nodes (a refused or unknown arm is sent again, with the
// same time, until one is acknowledged); and it pings one beeper of each shard through random
// nodes every 250 ms, which measures each shard's failover as the harness's failover test measures
// an object's: the time from a fault to the shard's first call served that began after it. After
// the faults and a quiet tail, every beeper's runs are read and checked (alarm_check.go).

// alarmNS is the namespace of the beepers; a beeper's log key is "alarms/" and its name.
const alarmNS = "alarms"

// beeper is one object of the alarm workload.
type beeper struct {
	st   *core.State
	node string
}

func newBeeper(node string) func(context.Context, *core.State) (*beeper, error) {
	return func(ctx context.Context, st *core.State) (*beeper, error) {
		_, err := st.Storage().Exec(ctx, `CREATE TABLE IF NOT EXISTS fired(n INTEGER PRIMARY KEY, scheduled INTEGER NOT NULL, fired INTEGER NOT NULL, node TEXT NOT NULL)`)
		return &beeper{st: st, node: node}, err
	}
}

// Alarm records the run: it commits with the turn, so a run whose node dies before the commit is
// not recorded, and runs again elsewhere.
func (b *beeper) Alarm(ctx context.Context, info core.AlarmInfo) error {
	_, err := b.st.Storage().Exec(ctx, `INSERT INTO fired(scheduled, fired, node) VALUES (?, ?, ?)`,
		info.Scheduled.UnixNano(), time.Now().UnixNano(), b.node)
	return err
}

// Fire is one recorded run of a beeper's alarm.
type Fire struct {
	Scheduled int64  `json:"scheduled"` // Unix ns: the time the alarm was set for
	Fired     int64  `json:"fired"`     // Unix ns: when it ran, by the running node's clock
	Node      string `json:"node"`
}

// alarmReply is the body of every answer of the alarm handler.
type alarmReply struct {
	Outcome string `json:"outcome"` // ok, refused, unknown
	Node    string `json:"node,omitempty"`
	Fires   []Fire `json:"fires,omitempty"`
	Error   string `json:"error,omitempty"`
}

// AlarmHandler registers the beepers in rt (methods arm, fires and ping, callable from any node)
// and returns the HTTP handler that serves them: POST /alarms/arm?key=K&at=NS (the alarm set for
// Unix ns NS; the answer names the node that set it), GET /alarms/fires?key=K and GET
// /alarms/ping?key=K (the answer names the node that served it), each answered with a JSON
// alarmReply.
func AlarmHandler(rt *core.Runtime, node string) (http.Handler, error) {
	ns, err := core.Register(rt, alarmNS, newBeeper(node))
	if err != nil {
		return nil, err
	}
	arm, err := core.Define(ns, "arm", func(ctx context.Context, b *beeper, at int64) (alarmReply, error) {
		return alarmReply{Outcome: "ok", Node: b.node}, b.st.SetAlarm(ctx, time.Unix(0, at))
	})
	if err != nil {
		return nil, err
	}
	fires, err := core.Define(ns, "fires", func(ctx context.Context, b *beeper, _ struct{}) (alarmReply, error) {
		rows, err := b.st.Storage().Query(ctx, `SELECT scheduled, fired, node FROM fired ORDER BY n`)
		if err != nil {
			return alarmReply{}, err
		}
		defer rows.Close()
		r := alarmReply{Outcome: "ok", Node: b.node}
		for rows.Next() {
			var f Fire
			if err := rows.Scan(&f.Scheduled, &f.Fired, &f.Node); err != nil {
				return alarmReply{}, err
			}
			r.Fires = append(r.Fires, f)
		}
		return r, rows.Err()
	})
	if err != nil {
		return nil, err
	}
	ping, err := core.Define(ns, "ping", func(_ context.Context, b *beeper, _ struct{}) (alarmReply, error) {
		return alarmReply{Outcome: "ok", Node: b.node}, nil
	})
	if err != nil {
		return nil, err
	}
	serve := func(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, stub *core.Stub[*beeper]) (alarmReply, error)) {
		reply, err := func() (alarmReply, error) {
			stub, err := ns.Get(r.URL.Query().Get("key"))
			if err != nil {
				return alarmReply{}, err
			}
			return fn(r.Context(), stub)
		}()
		if err != nil {
			reply = alarmReply{Outcome: classify(err), Error: err.Error()}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(reply)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /alarms/arm", func(w http.ResponseWriter, r *http.Request) {
		at, err := strconv.ParseInt(r.URL.Query().Get("at"), 10, 64)
		if err != nil {
			http.Error(w, "at: "+err.Error(), http.StatusBadRequest)
			return
		}
		serve(w, r, func(ctx context.Context, stub *core.Stub[*beeper]) (alarmReply, error) { return arm(ctx, stub, at) })
	})
	mux.HandleFunc("GET /alarms/fires", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, func(ctx context.Context, stub *core.Stub[*beeper]) (alarmReply, error) {
			return fires(ctx, stub, struct{}{})
		})
	})
	mux.HandleFunc("GET /alarms/ping", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, func(ctx context.Context, stub *core.Stub[*beeper]) (alarmReply, error) {
			return ping(ctx, stub, struct{}{})
		})
	})
	return mux, nil
}

// withAlarms serves /alarms/ with alarms and the rest with next.
func withAlarms(alarms, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/alarms/", alarms)
	mux.Handle("/", next)
	return mux
}

// alarmCall makes one call to a node's alarm handler.
func alarmCall(ctx context.Context, c *RuntimeClient, method, path string, q url.Values) (alarmReply, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path+"?"+q.Encode(), nil)
	if err != nil {
		return alarmReply{}, err
	}
	resp, err := c.HTTP.Do(req)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return alarmReply{}, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if err != nil {
		return alarmReply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return alarmReply{}, fmt.Errorf("faults: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	var reply alarmReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return alarmReply{}, fmt.Errorf("faults: %s %s: the answer: %w", method, path, err)
	}
	switch reply.Outcome {
	case "ok":
		return reply, nil
	case "refused":
		return reply, fmt.Errorf("%w: %s", ErrRefused, reply.Error)
	default:
		return reply, fmt.Errorf("faults: %s %s: %s", method, path, reply.Error)
	}
}

// armed is one alarm the harness set: when for, when its arm was acknowledged, and by which node
// (the beeper's owner then).
type armed struct {
	Key       string
	Shard     int
	Scheduled time.Time
	Acked     time.Time // zero: no arm was acknowledged
	Owner     string
	Attempts  int
}

// ping is a call to a shard's beeper that was served: when it was sent, when it returned, and the
// node that served it (the shard's owner then).
type ping struct {
	call, ret time.Time
	node      string
}

// alarmWorkload is the harness's side of the alarm workload.
type alarmWorkload struct {
	h       *harness
	clients []*RuntimeClient
	n       int // beepers to arm
	shards  int
	shardOf func(key string) int

	mu     sync.Mutex
	armed  []*armed
	pings  map[int][]ping // by shard
	probes map[int]string // by shard: the beeper pinged
	wg     sync.WaitGroup
	stop   context.CancelFunc
}

// startAlarms starts arming cfg.Alarms beepers over the first part of the run, and pinging a
// beeper of each shard, until stopArming. It returns nil if the run has no alarm workload.
func startAlarms(h *harness, clients []Client, seed uint64) *alarmWorkload {
	if h.cfg.Alarms == 0 {
		return nil
	}
	w := &alarmWorkload{h: h, n: h.cfg.Alarms, shards: h.cfg.Shards, pings: map[int][]ping{}, probes: map[int]string{}}
	for _, c := range clients {
		rc, ok := c.(*RuntimeClient)
		if !ok || rc.Log == nil {
			h.t.Fatalf("faults: the alarm workload needs the runtime target")
		}
		w.clients = append(w.clients, rc)
	}
	w.shardOf = w.clients[0].Log.ShardOf
	for i := 0; len(w.probes) < w.shards; i++ {
		name := "probe-" + strconv.Itoa(i)
		if s := w.shardOf(alarmNS + "/" + name); w.probes[s] == "" {
			w.probes[s] = name
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	h.t.Cleanup(func() { stop(); w.wg.Wait() }) // a run that fails early stops them too
	w.wg.Go(func() { w.arm(ctx, rand.New(rand.NewPCG(seed, 1<<32))) })
	for s, name := range w.probes {
		w.wg.Go(func() { w.probe(ctx, s, name, rand.New(rand.NewPCG(seed, 1<<33+uint64(s)))) })
	}
	return w
}

// arm arms the beepers one after the other, spread over the run less the longest lead, each due 4
// to 12 s after its arming began.
func (w *alarmWorkload) arm(ctx context.Context, r *rand.Rand) {
	span := max(w.h.cfg.Duration-12*time.Second, time.Second)
	for i := range w.n {
		next := w.h.start.Add(span * time.Duration(i) / time.Duration(w.n))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		name := "b" + strconv.Itoa(i)
		a := &armed{Key: alarmNS + "/" + name, Shard: w.shardOf(alarmNS + "/" + name),
			Scheduled: time.Now().Add(4*time.Second + time.Duration(r.Int64N(int64(8*time.Second))))}
		w.mu.Lock()
		w.armed = append(w.armed, a)
		w.mu.Unlock()
		q := url.Values{"key": {name}, "at": {strconv.FormatInt(a.Scheduled.UnixNano(), 10)}}
		for ctx.Err() == nil {
			c := w.clients[r.IntN(len(w.clients))]
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			reply, err := alarmCall(actx, c, http.MethodPost, "/alarms/arm", q)
			cancel()
			w.mu.Lock()
			a.Attempts++
			if err == nil {
				a.Acked, a.Owner = time.Now(), reply.Node
			}
			w.mu.Unlock()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// probe pings the shard's beeper through random nodes every 250 ms, recording each call served.
func (w *alarmWorkload) probe(ctx context.Context, shard int, name string, r *rand.Rand) {
	q := url.Values{"key": {name}}
	for ctx.Err() == nil {
		c := w.clients[r.IntN(len(w.clients))]
		call := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		reply, err := alarmCall(pctx, c, http.MethodGet, "/alarms/ping", q)
		cancel()
		if err == nil {
			w.mu.Lock()
			w.pings[shard] = append(w.pings[shard], ping{call: call, ret: time.Now(), node: reply.Node})
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fires reads a beeper's runs through the first node that answers, retrying within a deadline
// while the healed cluster settles.
func (w *alarmWorkload) fires(key string) ([]Fire, error) {
	name := strings.TrimPrefix(key, alarmNS+"/")
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reply, err := alarmCall(ctx, w.clients[i%len(w.clients)], http.MethodGet, "/alarms/fires", url.Values{"key": {name}})
		cancel()
		if err == nil {
			return reply.Fires, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reading the runs of %q: %w", key, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
