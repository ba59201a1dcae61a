package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrNoQuorum is returned (wrapped) by Node.Quorum while the node reaches fewer than a majority of
// its cluster's nodes: its streams cannot take a write, and a call that waits for one waits until
// a majority is back.
var ErrNoQuorum = errors.New("cluster: no quorum")

// noQuorumError says why a node has no quorum; it is ErrNoQuorum.
type noQuorumError string

func (e noQuorumError) Error() string { return string(e) }
func (e noQuorumError) Unwrap() error { return ErrNoQuorum }

// watchEvery is how often a node of a cluster looks at its routes and its JetStream meta group.
const watchEvery = time.Second

// view is what a node sees of its cluster at one time.
type view struct {
	connected map[string]bool // the peers it has a route to, by name
	routes    []string        // the addresses (host:port) of the routes it connected itself
	members   []string        // the other members of its JetStream meta group, by name
	size      int             // the meta group's size (0: not known yet)
	needed    int             // how many of its members make a quorum (0: a majority)
}

// peerWatch follows a node's peers and quorum through the views it is shown, and logs their
// changes: a peer lost and back, the quorum lost and back, once each.
type peerWatch struct {
	node string
	log  *slog.Logger

	mu        sync.Mutex           // protects what follows
	up        map[string]bool      // the peers seen connected at the last view
	lost      map[string]time.Time // the peers logged as lost, and since when
	hadQuorum bool                 // the node has had its quorum once
	noQuorum  error                // why it has no quorum now (nil: it has, or never had)
	lostAt    time.Time            // since when it has had none
}

func newPeerWatch(node string, log *slog.Logger) *peerWatch {
	return &peerWatch{node: node, log: log, up: map[string]bool{}, lost: map[string]time.Time{}}
}

// see takes in the view of time now.
func (w *peerWatch) see(now time.Time, v view) {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := slices.Clone(v.members)
	for name := range v.connected {
		known = append(known, name)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	for _, name := range known {
		switch {
		case name == w.node:
		case v.connected[name]:
			if since, ok := w.lost[name]; ok {
				delete(w.lost, name)
				w.log.Info("cluster: peer "+name+" is connected again", "node", w.node, "after", now.Sub(since).Round(time.Second))
			}
			w.up[name] = true
		case w.up[name]:
			delete(w.up, name)
			w.lost[name] = now
			w.log.Warn("cluster: lost the route to peer "+name, "node", w.node)
		}
	}
	if v.size < 2 || len(v.members) == 0 {
		return // alone, or the meta group is not formed yet
	}
	needed := v.needed
	if needed == 0 {
		needed = v.size/2 + 1
	}
	reach := 1
	var missing []string
	for _, name := range v.members {
		if name == w.node {
			continue // a node restarted may be listed among its own peers
		}
		if v.connected[name] {
			reach++
		} else {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	switch {
	case reach >= needed:
		if !w.hadQuorum {
			w.log.Info("cluster: node "+w.node+" has its quorum", "reaches", fmt.Sprintf("%d of %d nodes", reach, v.size))
		}
		if w.noQuorum != nil {
			w.log.Info("cluster: node "+w.node+" has its quorum again", "reaches", fmt.Sprintf("%d of %d nodes", reach, v.size), "after", now.Sub(w.lostAt).Round(time.Second))
		}
		w.hadQuorum, w.noQuorum = true, nil
	case w.hadQuorum && w.noQuorum == nil:
		w.lostAt = now
		w.noQuorum = noQuorumError(fmt.Sprintf("cluster: node %s lost its quorum at %s: it reaches %d of %d nodes (%s unreachable), and needs %d",
			w.node, now.Format(time.TimeOnly), reach, v.size, strings.Join(missing, ", "), needed))
		w.log.Warn(w.noQuorum.Error()+"; writes wait until a majority is back", "node", w.node)
	}
}

// quorum returns nil if the node has its quorum (or has never had it), and why not otherwise.
func (w *peerWatch) quorum() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.noQuorum
}
