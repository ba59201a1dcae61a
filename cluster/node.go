package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nuid"
)

// MaxPayload is the largest message a node started by StartNode accepts (8 MiB), so that a commit
// record of several MiB fits in one message.
const MaxPayload = 8 << 20

// The users of an embedded node.
const (
	appUser    = "durable"
	systemUser = "durable-system"
)

// NodeConfig configures an embedded JetStream node.
type NodeConfig struct {
	// Name names the node among the cluster's (required, unique, stable across restarts: JetStream
	// knows its peers by name).
	Name string

	// Dir is the node's own directory, where JetStream keeps its streams (required).
	Dir string

	// Port is the client port, on 127.0.0.1 unless Host says otherwise; 0 picks a free one.
	Port int

	// Host is the address the client and cluster ports listen on (default 127.0.0.1).
	Host string

	// ClusterName names the cluster; with it empty the node runs alone (a 1-node cluster, where
	// streams have 1 replica).
	ClusterName string

	// ClusterPort is the port the other nodes connect to; 0 picks a free one.
	ClusterPort int

	// Routes are the other nodes' cluster URLs (nats://host:port). Every node may list every
	// other; a node may list itself.
	Routes []string

	// ClusterAdvertise, if set, is the address this node tells the others to reach it at, in
	// place of its cluster port; a node learns of the others through those it is connected to.
	// Set it to an address that is never reached to keep nodes to their Routes (as a test that
	// routes links through proxies does).
	ClusterAdvertise string

	// Logger, if set, receives the node's log lines: the server's (its notices at Info level; a
	// line that a lasting condition repeats, as a route that does not connect, once per change of
	// state) and the node's own about its peers and its quorum ("cluster: ..."). nil keeps it
	// quiet.
	Logger *slog.Logger
}

// Node is a running embedded JetStream node. A node of a cluster watches its routes and its
// JetStream meta group (every second, from a goroutine that Shutdown stops): it logs a peer lost
// and back, and its quorum lost and back, once each, and Quorum says whether it has one.
type Node struct {
	srv     *server.Server
	watch   *peerWatch // nil for a node without a cluster
	log     *slog.Logger
	sysPass string // the system user's password, for requests of the system account (Drain)

	stopOnce sync.Once
	stop     chan struct{} // closed by Shutdown
	done     chan struct{} // closed when the watcher has returned
}

// StartNode starts an embedded NATS server with JetStream, fsync on every write (so that an
// acknowledged append is on the disks of a majority of the replicas, not in their page caches),
// and a maximum payload of MaxPayload. It returns once the node accepts clients; a cluster's
// JetStream is ready only once a majority of its nodes run (New waits for it).
func StartNode(cfg NodeConfig) (*Node, error) {
	if cfg.Name == "" || cfg.Dir == "" {
		return nil, errors.New("cluster: StartNode: Name and Dir are required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: StartNode %s: %w", cfg.Name, err)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       randomIfZero(cfg.Port),
		MaxPayload: MaxPayload,
		MaxPending: 4 * MaxPayload,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		SyncAlways: true,
		NoSigs:     true,
		NoLog:      cfg.Logger == nil,
	}
	// Clients that give no credentials (as Connect's) are the application's user, in the default
	// account, as they would be with no users at all; the system user, whose password is the
	// process's secret, lets Drain ask the JetStream meta leader to step down, which only the
	// system account may.
	sysPass := nuid.Next() + nuid.Next()
	sys := server.NewAccount(server.DEFAULT_SYSTEM_ACCOUNT)
	opts.Accounts = []*server.Account{sys}
	opts.SystemAccount = server.DEFAULT_SYSTEM_ACCOUNT
	opts.Users = []*server.User{
		{Username: appUser, Password: nuid.Next() + nuid.Next()},
		{Username: systemUser, Password: sysPass, Account: sys},
	}
	opts.NoAuthUser = appUser
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{
			Name:        cfg.ClusterName,
			Host:        cfg.Host,
			Port:        randomIfZero(cfg.ClusterPort),
			NoAdvertise: true,
			Advertise:   cfg.ClusterAdvertise,
		}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("cluster: StartNode %s: route %q is not a URL", cfg.Name, r)
			}
			opts.Routes = append(opts.Routes, u)
		}
	} else if len(cfg.Routes) > 0 {
		return nil, fmt.Errorf("cluster: StartNode %s: Routes without a ClusterName", cfg.Name)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: StartNode %s: %w", cfg.Name, err)
	}
	log := slog.New(slog.DiscardHandler)
	nlog := newNodeLog(log) // without a Logger, only for a port that cannot be listened on
	if cfg.Logger != nil {
		log = cfg.Logger
		nlog = newNodeLog(cfg.Logger.With("node", cfg.Name))
	}
	srv.SetLogger(nlog, false, false)
	srv.Start()
	if err := readyForConnections(srv, nlog, 30*time.Second); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("cluster: StartNode %s: %w", cfg.Name, err)
	}
	n := &Node{srv: srv, log: log, sysPass: sysPass, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.ClusterName == "" {
		close(n.done)
		return n, nil
	}
	n.watch = newPeerWatch(cfg.Name, log)
	go func() {
		defer close(n.done)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			select {
			case <-n.stop:
				return
			case now := <-tick.C:
				v := n.view()
				n.watch.see(now, v)
				for _, addr := range v.routes {
					if nlog != nil {
						nlog.connected(addr)
					}
				}
			}
		}
	}()
	return n, nil
}

// readyForConnections waits until srv accepts clients, for d at most, and fails at once if one of
// its ports cannot be listened on: the server says so (a fatal error, which it logs and does not
// act on) and would wait out d. The error then matches the listener's (syscall.EADDRINUSE for a
// port another process holds), so that a caller that picked the port may pick another.
func readyForConnections(srv *server.Server, nlog *nodeLog, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if srv.ReadyForConnections(20 * time.Millisecond) {
			return nil
		}
		select {
		case err := <-nlog.listenErr:
			return err
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready for connections within %v", d)
		}
	}
}

// view is what the node sees of its cluster now.
func (n *Node) view() view {
	v := view{connected: map[string]bool{}}
	if rz, err := n.srv.Routez(nil); err == nil {
		for _, r := range rz.Routes {
			if r.RemoteName != "" {
				v.connected[r.RemoteName] = true
			}
			if r.DidSolicit {
				v.routes = append(v.routes, net.JoinHostPort(r.IP, strconv.Itoa(r.Port)))
			}
		}
	}
	if jz, err := n.srv.Jsz(nil); err == nil && jz.Meta != nil {
		v.size, v.needed = jz.Meta.Size, jz.Meta.QuorumNeeded
		for _, p := range jz.Meta.Replicas {
			if p.Name != "" {
				v.members = append(v.members, p.Name)
			}
		}
	}
	return v
}

// Quorum returns nil while the node reaches a majority of its cluster's nodes (or runs alone, or
// has not had a quorum yet: a cluster that starts), and an error that is ErrNoQuorum, saying since
// when and which nodes it does not reach, once it has lost it (as seen within a second).
func (n *Node) Quorum() error {
	if n.watch == nil {
		return nil
	}
	return n.watch.quorum()
}

func randomIfZero(port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	return port
}

// ClientURL is the URL clients connect to (nats://127.0.0.1:port).
func (n *Node) ClientURL() string { return n.srv.ClientURL() }

// ClusterURL is the URL other nodes list in their Routes to reach this one; "" for a node
// without a cluster.
func (n *Node) ClusterURL() string {
	a := n.srv.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats://" + net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port))
}

// Shutdown stops the node's watcher and the node, and waits until they have stopped.
func (n *Node) Shutdown() {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}
