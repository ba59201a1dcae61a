//go:build !linux

package sqlstore

import (
	"io"
	"os"
)

// ownLockVFS is empty where the connection does not lock the file itself: SQLite's default VFS
// locks it (see filelock_linux.go).
const ownLockVFS = ""

func lockOwn(_ any, _ string, _ bool, hold *os.File) (io.ReaderAt, int64, error) {
	closeHold(hold)
	return nil, 0, errNoOwnLock
}

// holdLock is never called where the connection does not lock the file itself (see Park).
func holdLock(any, string) (*os.File, error) { return nil, errNoOwnLock }

// LockFile does nothing where SQLite's default VFS locks the files: the runtime's connections take
// SQLite's locks, which a file written outside SQLite does not need to hold.
func LockFile(*os.File) error { return nil }
