package core

import (
	"errors"
	"fmt"
	"os"

	"github.com/durable-go/durable/core/internal/datadir"
)

// LockedError is returned by Open when another runtime (in this process or another) holds the data
// directory. errors.Is(err, ErrLocked) reports it.
type LockedError struct {
	Dir string // the data directory
	PID int    // the process holding it, 0 if unknown
}

func (e *LockedError) Error() string {
	holder := "another runtime"
	if e.PID > 0 {
		holder = fmt.Sprintf("process %d", e.PID)
		if e.PID == os.Getpid() {
			holder += " (this process: a runtime already open on it)"
		}
	}
	return fmt.Sprintf("core: data directory %s is in use by %s", e.Dir, holder)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// lockDir takes the data directory's lock, or fails at once with a *LockedError.
func lockDir(dir string) (*datadir.Lock, error) {
	l, err := datadir.LockDir(dir)
	if he := (*datadir.HeldError)(nil); errors.As(err, &he) {
		return nil, &LockedError{Dir: dir, PID: he.PID}
	}
	return l, err
}
