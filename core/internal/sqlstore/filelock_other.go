//go:build !linux

package sqlstore

import (
	"io"
	"os"
)

// ownLockVFS is empty where the connection does not lock the file itself: SQLite's default VFS
// locks it (see filelock_linux.go).
const ownLockVFS = ""

func lockOwn(any, string, bool) (io.ReaderAt, int64, error) { return nil, 0, errNoOwnLock }

// LockFile does nothing where SQLite's default VFS locks the files: the runtime's connections take
// SQLite's locks, which a file written outside SQLite does not need to hold.
func LockFile(*os.File) error { return nil }
