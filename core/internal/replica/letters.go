package replica

import (
	"context"
	"errors"

	"github.com/durable-go/durable/replog"
)

// The cluster's dead letters (alarms given up after their last retry) are one list of records
// under a key of the log that no object can have (a namespace starts with a letter), so that any
// node lists them and any node removes one, whichever node gave the alarm up and whether or not it
// still runs. The records are the runtime's; the list only orders them, each at the sequence its
// append got, which numbers the letter across the cluster.
const lettersKey = "_durable/dead-letters"

// AppendLetter adds rec at the end of the cluster's list of dead letters and returns its sequence.
// Writers on several nodes race on the list's last sequence; the loser reads it again and retries,
// so every record is added once. An append whose outcome the log cannot tell
// (replog.ErrUnknown) is returned as it is: the record may be there.
func (n *Node) AppendLetter(ctx context.Context, rec []byte) (uint64, error) {
	for {
		last, _, err := n.cfg.Log.Last(ctx, lettersKey)
		if err != nil {
			return 0, err
		}
		seq, err := n.cfg.Log.Append(ctx, lettersKey, last, rec)
		if errors.Is(err, replog.ErrConflict) && ctx.Err() == nil {
			continue
		}
		return seq, err
	}
}

// Letters calls fn with every record of the cluster's list of dead letters, in order.
func (n *Node) Letters(ctx context.Context, fn func(seq uint64, rec []byte) error) error {
	return n.cfg.Log.Read(ctx, lettersKey, 0, fn)
}
