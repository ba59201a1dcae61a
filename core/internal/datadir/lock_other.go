//go:build !unix

package datadir

import (
	"errors"
	"os"
)

var errLockHeld = errors.New("lock held")

// tryLock has no OS lock to take on this system: the directory is not protected.
func tryLock(*os.File) error { return nil }

func unlockFile(*os.File) {}
