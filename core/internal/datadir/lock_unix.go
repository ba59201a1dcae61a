//go:build unix

package datadir

import (
	"errors"
	"os"
	"syscall"
)

var errLockHeld = errors.New("lock held")

// tryLock takes an exclusive flock on f without waiting. A flock belongs to the open file: a
// second open of the same file, in this process too, cannot take it.
func tryLock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errLockHeld
		}
		return err
	}
}

func unlockFile(f *os.File) { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
