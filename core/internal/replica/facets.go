package replica

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/durable-go/durable/internal/logrecord"
)

// An object's facets (child objects, each with a database of its own under the object's facets
// directory) write in the object's log: a facet's commit is a record of that log, tagged with the
// facet's database (payload.go), appended after the log's last record like the object's own. So a
// facet is in its object's shard, under its lease and epoch: it moves, replays, snapshots and is
// fenced with its object. The object and each of its facets resident on this node are Objects
// sharing one logState; each brings its own file to the log's head, reading only its own records.

// logState is an object's log as this node appends to it, shared by the object and its facets.
type logState struct {
	mu       sync.Mutex // held across each read of the log into a file, each append and each snapshot
	refs     int        // the Objects sharing it (guarded by Node.mu)
	open     *lease     // the lease under which this node's epoch record is in; nil: none yet
	gen      uint64     // counts the epoch records this node appended: a file synced before the last is read again
	seq, sum uint64     // the log's last record, as this node appended or read it, and its checksum
	epoch    uint64     // this node's epoch for the object
	records  int        // records since the last snapshot
	blobs    []string   // the blobs of the last snapshot, deleted when the next one is in
	facets   bool       // the log is known to hold facets' records: snapshots carry every database
	scanned  *lease     // the lease under which the log was read and found without facets' records
	// active is when an Object of the log last committed or took the log over here (Unix ns, by
	// the runtime's clock; 0: never): beats name the most recent, for warm takeover (warm.go).
	active atomic.Int64
}

// Facet returns the cluster side of a facet of the object ns/name: its database's path below the
// object's facets directory is db, its local file path. It shares the object's log and shard.
func (n *Node) Facet(ns, name, db, path string) *Object {
	x := n.Object(ns, name, path)
	x.db = filepath.ToSlash(db)
	x.log.mu.Lock()
	x.log.facets = true
	x.log.mu.Unlock()
	return x
}

// attach returns the log state of key, shared with the other Objects of the key on this node.
func (n *Node) attach(key string) *logState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.logs == nil {
		n.logs = map[string]*logState{}
	}
	lg := n.logs[key]
	if lg == nil {
		lg = &logState{}
		n.logs[key] = lg
	}
	lg.refs++
	return lg
}

// detach is told that an Object of key is dropped.
func (n *Node) detach(key string, lg *logState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if lg.refs--; lg.refs <= 0 && n.logs[key] == lg {
		delete(n.logs, key)
	}
}

// hasFacets reports whether the object's log holds a facet's record (or a snapshot of facets): a
// snapshot must then carry every database. It reads the log's records from its first, which is
// the last snapshot's, and is called with lg.mu held, only while lg.facets is false.
func (x *Object) hasFacets(ctx context.Context) (bool, error) {
	found := false
	err := x.n.cfg.Log.Read(ctx, x.key, 0, func(_ uint64, b []byte) error {
		r, err := logrecord.Decode(b)
		if err != nil {
			return err
		}
		if r.Flags&logrecord.Tagged != 0 {
			found = true
			return errFirstRead
		}
		return nil
	})
	if errors.Is(err, errFirstRead) {
		err = nil
	}
	return found, err
}
