package sqlstore

import (
	"errors"
	"time"
)

// ErrBusy is returned by Open and OpenReadOnly when another connection, in this process or another, holds the
// file and does not let it go within the busy timeout.
var ErrBusy = errors.New("database is locked: another connection holds the file")

// busyTimeout is how long Open waits for another connection to let go of the file, as SQLite's
// busy_timeout does for its own locks.
const busyTimeout = 10 * time.Second

// errNoOwnLock says the connection's file descriptor could not be found and checked: Open falls
// back to SQLite's default VFS and its locks.
var errNoOwnLock = errors.New("no file descriptor to lock")
