package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the file in the data directory whose OS lock says which process owns it.
const LockFile = "_runtime.lock"

// HeldError is returned by LockDir when another runtime (in this process or another) holds the
// directory.
type HeldError struct {
	PID int // the process holding it, as it wrote in the lock file; 0 if unknown
}

func (e *HeldError) Error() string {
	if e.PID == 0 {
		return "data directory locked by another runtime"
	}
	return fmt.Sprintf("data directory locked by process %d", e.PID)
}

// Lock is the held lock on a data directory, released by Unlock (and by the OS when the process
// ends, however it ends).
type Lock struct{ f *os.File }

// LockDir takes the data directory's lock, or fails at once with a *HeldError.
func LockDir(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
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
		return nil, &HeldError{PID: pid}
	}
	// The holder's PID, for the error of the next one; advisory only: the lock is the truth.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock. It may be called more than once.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	unlockFile(f)
	return f.Close()
}
