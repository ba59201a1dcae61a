package replica

import (
	"errors"
	"fmt"
	"time"
)

// The errors of cluster mode that reach the runtime's callers; package core exports them under the
// same names, with their documentation.
var (
	ErrFenced        = errors.New("core: fenced: another node took the object over")
	ErrLeaseUnproven = errors.New("core: the object's lease cannot be proven valid")
	ErrCommitUnknown = errors.New("core: commit outcome unknown")
)

// NotOwner is returned by Claim while another node holds a valid lease on the object.
type NotOwner struct {
	Key    string    // the object's lease key
	Holder string    // the holding node
	Until  time.Time // by this node's clock, the earliest time it may take the object over if unrenewed
}

func (e *NotOwner) Error() string {
	return fmt.Sprintf("core: %s is owned by node %q", e.Key, e.Holder)
}
