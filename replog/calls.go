package replog

import (
	"context"
	"errors"
)

// Calls carries requests between the nodes of a cluster, and their replies: bytes in, bytes out.
// The runtime uses it to send a call (or an HTTP request) for an object to the node that owns the
// object's shard, and to serve the calls the others send it. It knows nothing of objects: a request
// is addressed to a node by its name, and what it holds is the runtime's business.
//
// A Calls must not depend on the replicated layer (no leader, no quorum): like a Beacon, it needs
// only the links between the nodes. A request is delivered at most once.
type Calls interface {
	// Serve calls handle with every request addressed to node, each call on a goroutine of its own
	// (requests are handled concurrently), and sends what handle returns back as the reply, until
	// stop is called. handle's ctx ends when stop is called. stop returns once no call of handle is
	// under way or will begin. A node is served at most once at a time.
	Serve(node string, handle func(ctx context.Context, req []byte) []byte) (stop func(), err error)

	// Send sends req to node and returns its reply. It fails with an error that matches
	// ErrUnreachable if the request was not delivered (no node of that name serves, or the link to
	// it is cut): it was not handled. It fails with an error that matches ErrNoReply if the request
	// was sent but no reply came before ctx ended: it may or may not have been handled. A request
	// or a reply longer than MaxCallBytes fails with an error that matches ErrCallTooLarge.
	Send(ctx context.Context, node string, req []byte) ([]byte, error)

	// MaxCallBytes is the longest request or reply the transport carries.
	MaxCallBytes() int
}

// Errors of a Calls, wrapped as the transport likes: the runtime tells them apart with errors.Is.
var (
	// ErrUnreachable is returned by Calls.Send when the request was not delivered: it was not
	// handled, and may be sent again.
	ErrUnreachable = errors.New("replog: node unreachable")
	// ErrNoReply is returned by Calls.Send when the request was sent but no reply came in time: it
	// may or may not have been handled.
	ErrNoReply = errors.New("replog: no reply")
	// ErrCallTooLarge is returned by Calls.Send for a request longer than MaxCallBytes.
	ErrCallTooLarge = errors.New("replog: request too large")
)
