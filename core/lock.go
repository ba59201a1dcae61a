package core

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockFile is the file in the data directory whose OS lock says which process owns it.
const lockFile = "_runtime.lock"

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

// dirLock is the held lock on a data directory, released by unlock (and by the OS when the
// process ends, however it ends).
type dirLock struct{ f *os.File }

// lockDir takes the data directory's lock, or fails at once with a *LockedError.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if !errors.Is(err, errLockHeld) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	// The holder's PID, for the error of the next one; advisory only: the lock is the truth.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	unlockFile(f)
	return f.Close()
}
