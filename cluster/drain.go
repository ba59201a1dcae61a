package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A node's leaderships: a stream's raft group whose leader is lost stops taking writes until its
// followers elect another, which takes seconds (nats-server waits 4 to 9 s before a follower
// campaigns); a leader that steps down hands over at once. Drain does that for a planned stop.

// Leaders returns the name of the JetStream meta leader as this node sees it ("" if none) and the
// streams whose leader this node is, sorted (those of an account other than JetStream's default
// one as "account stream").
func (n *Node) Leaders() (meta string, streams []string) {
	meta, all := n.jetStreamView()
	name := n.srv.Name()
	for s, leader := range all {
		if leader != name {
			continue
		}
		if s.account == globalAccount {
			streams = append(streams, s.stream)
		} else {
			streams = append(streams, s.account+" "+s.stream)
		}
	}
	slices.Sort(streams)
	return meta, streams
}

const globalAccount = "$G"

type accountStream struct{ account, stream string }

// jetStreamView returns the meta leader and the leader of each stream of which the node keeps a replica,
// as the node sees them ("" for none).
func (n *Node) jetStreamView() (meta string, leaders map[accountStream]string) {
	jz, err := n.srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return "", nil
	}
	if jz.Meta != nil {
		meta = jz.Meta.Leader
	}
	leaders = map[accountStream]string{}
	for _, acc := range jz.AccountDetails {
		for _, s := range acc.Streams {
			leader := ""
			if s.Cluster != nil {
				leader = s.Cluster.Leader
			}
			leaders[accountStream{acc.Name, s.Name}] = leader
		}
	}
	return meta, leaders
}

// Drain hands over every raft leadership the node holds, for a planned stop: each stream it leads
// steps down, and so does the JetStream meta group if it leads it; then Drain waits until another
// node leads each of them, asking again every second, until ctx ends. A Shutdown that follows
// costs no election stall: the streams' new leaders take writes already. The node goes on
// serving as a follower (and may be elected again if another node fails meanwhile). A node
// without a cluster has nothing to hand over.
func (n *Node) Drain(ctx context.Context) error {
	if n.watch == nil {
		return nil
	}
	name := n.srv.Name()
	handing := map[accountStream]bool{} // the streams it led since Drain began
	metaLed := false
	var asked time.Time
	for {
		meta, leaders := n.jetStreamView()
		var waiting []string // streams not led by another node yet
		var lead []accountStream
		for s, leader := range leaders {
			if leader == name {
				handing[s] = true
				lead = append(lead, s)
			}
			if handing[s] && (leader == "" || leader == name) {
				waiting = append(waiting, s.stream)
			}
		}
		metaLed = metaLed || meta == name
		metaWaits := metaLed && (meta == "" || meta == name)
		if !metaWaits && len(waiting) == 0 {
			return nil
		}
		if time.Since(asked) >= time.Second {
			asked = time.Now()
			for _, s := range lead {
				_ = n.srv.JetStreamStepdownStream(s.account, s.stream)
			}
			if meta == name {
				if err := n.stepDownMeta(ctx); err != nil {
					n.log.Debug("cluster: drain: meta leader step-down", "error", err)
				}
			}
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			slices.Sort(waiting)
			return fmt.Errorf("cluster: drain of %s: %d streams not led by another node yet (%s), meta leader %q: %w",
				name, len(waiting), nameSome(waiting, 4), meta, err)
		}
	}
}

// stepDownMeta asks the JetStream meta leader (this node) to step down: a request of the system
// account's, sent over an in-process connection as the node's system user.
func (n *Node) stepDownMeta(ctx context.Context) error {
	nc, err := nats.Connect("", nats.InProcessServer(n.srv), nats.UserInfo(systemUser, n.sysPass), nats.Name("durable drain"))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.META.LEADER.STEPDOWN", nil)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	if !resp.Success {
		return errors.New("not done")
	}
	return nil
}

// Leaders returns the name of the server that leads each of the engine's streams ("" for one
// without a leader now), as its stream information says. It is for tests and measurements: the
// request goes to the stream's leader, or to the JetStream meta leader for a stream without one.
func (e *Engine) Leaders(ctx context.Context) (map[string]string, error) {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	leaders := make(map[string]string, e.cfg.Shards)
	for shard := range e.cfg.Shards {
		name := e.streamName(shard)
		actx, acancel := context.WithTimeout(ctx, e.cfg.AttemptTimeout)
		s, err := e.js.Stream(actx, name)
		acancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("cluster: leaders: %s: %w", name, err)
		case err != nil:
			leaders[name] = ""
		case s.CachedInfo().Cluster != nil:
			leaders[name] = s.CachedInfo().Cluster.Leader
		default:
			leaders[name] = ""
		}
	}
	return leaders, nil
}
