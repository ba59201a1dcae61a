package sqlstore

import (
	"fmt"
	"os"
)

// Park closes the database's connection, for an owner that expects it to stay idle longer than
// Quiesce is meant for, and keeps the file: what stays is one file descriptor, a duplicate of the
// database's, which keeps the lock the connection held (see ownLockVFS: the lock belongs to the
// open file description, which the duplicate shares), so that no other connection, in this
// process or another, reads or writes the file while it is parked. SQLite's memory for the
// connection goes (its page cache, statements, schema, the log's index, its thread state), and so
// does the log's descriptor. The next statement opens the connection again (a warm reopen: the
// schema and the log's index are read back from the files and the operating system's cache), its
// new descriptor taking the lock over from the parked one with no moment when the file is free to
// a writer; woke, if not nil, is called then, once, or at Close.
//
// Nothing durable is touched: no transaction may be open (as for Quiesce), and parking closes the
// connection as Close does (a log past WALTrim, or any log with synchronous NORMAL, is
// checkpointed first; with FULL every commit was fsynced in the log before it was acknowledged, and
// the reopen reads the log back as an open after a crash does). If that checkpoint fails, the
// database is not parked.
//
// Park parks only where it can keep the lock (Linux, where the connection locks the file itself),
// and only a database whose user SQL made no TEMP object (TEMP tables, views, indexes and
// triggers live as long as the connection). It reports whether the database is parked.
func (s *DB) Park(woke func()) (bool, error) {
	if s.parked {
		return true, nil
	}
	if !s.ownLock || s.temp {
		return false, nil
	}
	if s.quiet { // Quiesce's caller is told now: the database is parked, no longer quiesced
		s.noLook = false
		s.awake()
	}
	if err := s.trimLog(); err != nil {
		return false, fmt.Errorf("checkpoint before parking: %w", err)
	}
	var hold *os.File
	err := s.conn.Raw(func(dc any) error {
		var err error
		hold, err = holdLock(dc, s.path)
		return err
	})
	if err != nil {
		return false, err
	}
	err = s.disconnect()
	s.parked, s.hold, s.quiet, s.woke = true, hold, true, woke
	return true, err
}

// Parked reports whether Park closed the connection and no statement has run since.
func (s *DB) Parked() bool { return s.parked }

// closeHold closes a parked database's descriptor, if any, letting go of its lock.
func closeHold(hold *os.File) error {
	if hold == nil {
		return nil
	}
	return hold.Close()
}
