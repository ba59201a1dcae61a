package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/durable-go/durable/cluster"
	"github.com/durable-go/durable/core"
)

// NodeStatus is what a node process of the runtime target says of itself at GET /status: whether
// it is ready, which raft groups it leads, which node leads the JetStream meta group as it knows,
// and which node owns each shard (its runtime's table).
type NodeStatus struct {
	Node       string         `json:"node"`
	Ready      string         `json:"ready,omitempty"` // why the node is not ready; "" when it is
	MetaLeader string         `json:"meta_leader"`     // the JetStream meta group's leader
	Leads      []string       `json:"leads"`           // the streams whose raft group this node leads
	Owners     map[int]string `json:"owners,omitempty"`
}

// IsMetaLeader reports whether the node leads the JetStream meta group.
func (s NodeStatus) IsMetaLeader() bool { return s.MetaLeader != "" && s.MetaLeader == s.Node }

// readiness is nil once the node's runtime can serve (its Stats' Cluster.Ready): it has heard the
// other nodes' beats, its engine answers, and it does not drain.
func readiness(rt *core.Runtime) error { return rt.Stats().Cluster.Ready }

// statusHandler serves GET /readyz (200 while ready says nil, 503 and the reason otherwise), GET
// /status (a NodeStatus as JSON) and POST /handover (the node hands every raft leadership it holds
// over, and keeps serving as a follower: cluster.Node.Drain) for the node process named name, and
// passes everything else to next.
func statusHandler(name string, node *cluster.Node, rt *core.Runtime, ready func() error, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.HandleFunc("POST /handover", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		if err := node.Drain(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "handed over\n")
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		st := NodeStatus{Node: name}
		if err := ready(); err != nil {
			st.Ready = err.Error()
		}
		st.Owners = rt.Stats().Cluster.Owners
		st.MetaLeader, st.Leads = node.Leaders()
		if st.Leads == nil {
			st.Leads = []string{}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	return mux
}

// Ready implements Readier: nil once the node answers GET /readyz with 200.
func (RuntimeTarget) Ready(ctx context.Context, spec NodeSpec) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", spec.ServePort), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("faults: node %s: %s: %s", spec.Name, resp.Status, b)
	}
	return nil
}
