package sqlstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// ownLockVFS is the VFS an object database opens with where the connection locks the file itself:
// "unix-none", SQLite's unix VFS without its locks. SQLite's own locks are POSIX record locks,
// which a process loses when it closes any descriptor of the file; so the unix VFS keeps a record
// of every open file's inode, and walks that list at each open (twice for a database: to find a
// descriptor to reuse, and the file's record), a cost that grows with the number of open files:
// with 8,000 databases open, the walks took a third of the CPU time of calls spread over 10,000
// objects. An open file description lock (F_OFD_SETLK) belongs to the descriptor, not to the
// process: it needs no such list. It conflicts with POSIX locks and with other OFD locks, taken in this process or another,
// so any other SQLite connection to the file, whatever its VFS, is refused (SQLITE_BUSY) while it
// is held; and it goes with the descriptor, at close or with the process. The connection uses
// exclusive locking mode, so SQLite needs no lock of its own: the log's index is in the
// connection's memory, and the connection holds the file from before its first read to its close.
const ownLockVFS = "unix-none"

// ptrSize is the size of a C pointer.
const ptrSize = 4 << (^uintptr(0) >> 63)

// fOFDSetlk is F_OFD_SETLK, the same on every Linux architecture.
const fOFDSetlk = 37

// lockOwn takes an OFD lock on the whole database file of the driver's connection dc, whose path is
// path (a write lock, or a read lock for a read-only connection), waiting up to busyTimeout for
// another holder to let go. It returns errNoOwnLock if the connection's descriptor could not be
// found, or is not the path's file.
//
// Every connection of the runtime's to an object's file locks it this way, the read-only ones too
// (OpenReadOnly): none holds a POSIX lock on it. That matters because the connection that fails to
// get the lock closes its descriptor, and closing any descriptor of a file drops every POSIX lock
// the process holds on it (the reason for the unix VFS's list): an OFD lock is not dropped so.
//
// It returns the file, to be read through SQLite's descriptor while the connection is open, and its
// size. hold, if not nil, is a parked database's descriptor (holdLock), which holds the write lock on the
// file: lockOwn takes the lock over from it and closes it, whatever happens. Two OFD locks conflict
// even in one process, so the handover goes through a read lock: hold's lock becomes a read lock,
// the connection takes a read lock beside it, hold is closed, and the connection's lock becomes a
// write lock. The file is read-locked throughout, so no writer can take it meanwhile; a reader of
// another process that takes a read lock in between makes the last step wait for it, as any open
// waits.
func lockOwn(dc any, path string, write bool, hold *os.File) (io.ReaderAt, int64, error) {
	fd := -1
	if !handle(dc, func(t *libc.TLS, h uintptr) { fd = mainFD(t, h) }) || fd < 0 {
		closeHold(hold)
		return nil, 0, errNoOwnLock
	}
	// The descriptor is read from SQLite's file object by its layout: it must be the path's file.
	fi, err := os.Stat(path)
	if err != nil {
		closeHold(hold)
		return nil, 0, err
	}
	var st syscall.Stat_t
	want, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || syscall.Fstat(fd, &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
		closeHold(hold)
		return nil, 0, errNoOwnLock
	}
	if hold != nil {
		err := handOver(hold, fd, path, &st)
		if cerr := hold.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, 0, err
		}
	}
	return fdFile(fd), st.Size, lockFD(fd, path, write)
}

// fdFile reads a file through a descriptor it does not own (SQLite's).
type fdFile int

func (f fdFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := syscall.Pread(int(f), p, off)
	switch {
	case err != nil:
		return 0, err
	case n < len(p):
		return n, io.EOF
	}
	return n, nil
}

// handOver turns hold's write lock into a read lock and takes a read lock on fd, the descriptor of
// the same file (st is fd's), for lockOwn.
func handOver(hold *os.File, fd int, path string, st *syscall.Stat_t) error {
	var hst syscall.Stat_t
	if err := syscall.Fstat(int(hold.Fd()), &hst); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if hst.Dev != st.Dev || hst.Ino != st.Ino {
		return fmt.Errorf("lock %s: the file was replaced while its database was parked", path)
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK}
	if err := syscall.FcntlFlock(hold.Fd(), fOFDSetlk, &lk); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return lockFD(fd, path, false)
}

// holdLock returns a duplicate of the database descriptor of the driver's connection dc, whose path
// is path: it keeps the connection's lock (an OFD lock belongs to the open file description, which
// the duplicate shares) after the connection closes, for Park.
func holdLock(dc any, path string) (*os.File, error) {
	fd := -1
	if !handle(dc, func(t *libc.TLS, h uintptr) { fd = mainFD(t, h) }) || fd < 0 {
		return nil, errNoOwnLock
	}
	dup, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, fmt.Errorf("keep the lock of %s: %w", path, errno)
	}
	return os.NewFile(dup, path), nil
}

// LockFile takes on f, a database file written outside SQLite (caught up from a log), the lock an
// open database holds on its file, waiting up to the busy timeout for another connection to let go
// of it: no connection of the runtime's, a background check's included, reads the file while it is
// written. The lock goes with f's Close.
func LockFile(f *os.File) error { return lockFD(int(f.Fd()), f.Name(), true) }

// lockFD takes an OFD lock on the whole file of descriptor fd (path names it in errors), waiting up
// to busyTimeout.
func lockFD(fd int, path string, write bool) error {
	wait := time.Millisecond
	for deadline := time.Now().Add(busyTimeout); ; {
		lk := syscall.Flock_t{Type: syscall.F_RDLCK} // whole file: start 0, length 0 (to any end)
		if write {
			lk.Type = syscall.F_WRLCK
		}
		err := syscall.FcntlFlock(uintptr(fd), fOFDSetlk, &lk)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%s: %w", path, ErrBusy)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// mainFD returns the file descriptor of the main database of the SQLite connection h, or -1. The
// unix VFS's file object begins with three pointers (its methods, its VFS, its inode record) and
// then the descriptor.
func mainFD(t *libc.TLS, h uintptr) int {
	p := t.Alloc(8)
	defer t.Free(8)
	clear(libc.GoBytes(p, 8))
	z, err := libc.CString("main")
	if err != nil {
		return -1
	}
	defer libc.Xfree(t, z)
	if sqlite3.Xsqlite3_file_control(t, h, z, sqlite3.SQLITE_FCNTL_FILE_POINTER, p) != sqlite3.SQLITE_OK {
		return -1
	}
	var file uintptr
	if ptrSize == 8 {
		file = uintptr(binary.NativeEndian.Uint64(libc.GoBytes(p, 8)))
	} else {
		file = uintptr(binary.NativeEndian.Uint32(libc.GoBytes(p, 4)))
	}
	if file == 0 {
		return -1
	}
	return int(int32(binary.NativeEndian.Uint32(libc.GoBytes(file+3*ptrSize, 4))))
}
