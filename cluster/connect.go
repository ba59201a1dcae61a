package cluster

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect connects to a JetStream cluster, embedded (a Node's ClientURL) or external (any of its
// servers' URLs), with the settings the engine needs: it reconnects forever, to any of urls, and
// it buffers nothing while disconnected, so that a publish made while the connection is down
// fails at once instead of being sent later, after its caller was told its outcome is unknown.
// More options (credentials, TLS) go in opts, after these.
func Connect(urls []string, opts ...nats.Option) (*nats.Conn, error) {
	if len(urls) == 0 {
		return nil, errors.New("cluster: Connect: no URL")
	}
	base := []nats.Option{
		nats.Name("durable"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.Timeout(2 * time.Second),
		nats.PingInterval(2 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.RetryOnFailedConnect(false),
	}
	nc, err := nats.Connect(strings.Join(urls, ","), append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cluster: Connect %v: %w", urls, err)
	}
	return nc, nil
}
