//go:build !linux

package sqlstore

// ownLockVFS is empty where the connection does not lock the file itself: SQLite's default VFS
// locks it (see filelock_linux.go).
const ownLockVFS = ""

func lockOwn(any, string, bool) error { return errNoOwnLock }
