package sqlstore

import (
	"fmt"
	"sync"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite's default lookaside allocator (SQLITE_DEFAULT_LOOKASIDE): 40 slots of 1,200 bytes, taken by
// each connection at open. A database in use gets it back after Quiesce.
const (
	lookasideSlot  = 1200
	lookasideSlots = 40
)

// lookasideBufs are lookaside buffers given back by Quiesce and by closing connections, kept for
// the next connection to open or to take its lookaside back (wake), at most maxLookasideBufs of them
// (48 KB each). A buffer SQLite allocates and frees at each open, quiesce, wake and close comes from
// the C heap's allocator, which hands regions freed
// in numbers back to the operating system (madvise) and faults them in again when they are reused:
// over thousands of objects woken in turn, a third of the CPU time of the wakes. A kept buffer stays
// in memory. Each is used by one connection at a time: it is taken back only once SQLite has let
// go of it (its lookaside turned off).
var lookasideBufs struct {
	mu   sync.Mutex
	free []uintptr
	tls  *libc.TLS // frees the buffers past the bound
}

const maxLookasideBufs = 1024

// takeLookaside returns a kept lookaside buffer, or a new one allocated with t (0: out of memory).
func takeLookaside(t *libc.TLS) uintptr {
	lookasideBufs.mu.Lock()
	if n := len(lookasideBufs.free); n > 0 {
		p := lookasideBufs.free[n-1]
		lookasideBufs.free = lookasideBufs.free[:n-1]
		lookasideBufs.mu.Unlock()
		return p
	}
	lookasideBufs.mu.Unlock()
	return libc.Xmalloc(t, types.Size_t(lookasideSlot*lookasideSlots))
}

// keepLookaside keeps buffer p, which SQLite no longer uses, for takeLookaside.
func keepLookaside(p uintptr) {
	lookasideBufs.mu.Lock()
	defer lookasideBufs.mu.Unlock()
	if len(lookasideBufs.free) < maxLookasideBufs {
		lookasideBufs.free = append(lookasideBufs.free, p)
		return
	}
	if lookasideBufs.tls == nil {
		lookasideBufs.tls = libc.NewTLS()
	}
	libc.Xfree(lookasideBufs.tls, p)
}

// lookasideOff turns the lookaside allocator of the connection h off, and reports whether it could
// (not while a slot is in use: SQLITE_BUSY). A buffer of lookasideBufs the connection used is kept
// again.
func (s *DB) lookasideOff(t *libc.TLS, h uintptr) bool {
	if dbConfig(t, h, sqlite3.SQLITE_DBCONFIG_LOOKASIDE, uintptr(0), int32(0), int32(0)) != sqlite3.SQLITE_OK {
		return false
	}
	if s.look != 0 {
		keepLookaside(s.look)
		s.look = 0
	}
	return true
}

// keptLookaside gives the driver's connection dc, just opened, a kept lookaside buffer: the one
// SQLite set up at open goes back at once (its C heap region is freed as soon as it was allocated,
// so the next open takes it back as it is), and the connection's quiesces and its close give their
// buffer to the next connection, not back to the allocator (see lookasideBufs).
func (s *DB) keptLookaside(dc any) {
	handle(dc, func(t *libc.TLS, h uintptr) {
		if s.lookasideOff(t, h) {
			s.lookasideOn(t, h)
		}
	})
}

// lookasideBack keeps the connection's lookaside buffer again before it closes. The buffer is kept
// only once SQLite has let go of it; else it stays with the connection, which may outlive its close
// (a statement left unfinalized).
func (s *DB) lookasideBack() {
	if s.look == 0 {
		return
	}
	s.conn.Raw(func(dc any) error {
		handle(dc, func(t *libc.TLS, h uintptr) { s.lookasideOff(t, h) })
		return nil
	})
	s.look = 0
}

// lookasideOn gives the connection h its lookaside allocator back, in a buffer of lookasideBufs.
func (s *DB) lookasideOn(t *libc.TLS, h uintptr) {
	p := takeLookaside(t)
	if p == 0 {
		return // no lookaside: SQLite allocates from the heap
	}
	if dbConfig(t, h, sqlite3.SQLITE_DBCONFIG_LOOKASIDE, p, int32(lookasideSlot), int32(lookasideSlots)) != sqlite3.SQLITE_OK {
		keepLookaside(p)
		return
	}
	s.look = p
}

// Quiesce gives back what the database holds in memory beyond its connection, for an owner that
// expects it to stay idle: its prepared statements (the owner's, its user's and the transaction
// statements), SQLite's page cache (the pages go back to the allocator; the file and the operating
// system's cache still hold them) and the connection's lookaside allocator. Nothing durable is
// touched: no transaction may be open (the owner's next statement is the first since its last
// commit), and no setting changes but the lookaside's, which the next statement restores before it
// is prepared. woke, if not nil, is called then, once. The caller is the database's one user, as
// for any statement.
func (s *DB) Quiesce(woke func()) error {
	if s.quiet {
		return nil
	}
	s.ForgetStmts()
	s.closeOwn()
	err := s.conn.Raw(func(dc any) error {
		handle(dc, func(t *libc.TLS, h uintptr) {
			sqlite3.Xsqlite3_db_release_memory(t, h)
			// Refused (SQLITE_BUSY) while any lookaside slot is in use: the allocator is then kept.
			s.noLook = s.lookasideOff(t, h)
		})
		return nil
	})
	if err != nil {
		return err
	}
	s.quiet, s.woke = true, woke
	return nil
}

// wake undoes Quiesce or Park before the database's next statement: a parked database opens its
// connection again, and the lookaside allocator comes back (statements and the pages come back as
// they are used). If the connection cannot be opened, the database stays parked (without its
// lock if the failure came after the new connection took it over) and the next statement tries
// again.
func (s *DB) wake() error {
	if s.parked {
		hold := s.hold
		s.hold = nil
		if err := s.connect(hold, nil); err != nil {
			return fmt.Errorf("reopening a parked database: %w", err)
		}
		s.parked = false
	}
	if s.noLook {
		s.noLook = false
		s.conn.Raw(func(dc any) error {
			handle(dc, func(t *libc.TLS, h uintptr) { s.lookasideOn(t, h) })
			return nil
		})
	}
	s.awake()
	return nil
}

// awake ends the quiet state and tells Quiesce's caller.
func (s *DB) awake() {
	s.quiet = false
	if w := s.woke; w != nil {
		s.woke = nil
		w()
	}
}

// Quiet reports whether the database is quiesced or parked: Quiesce or Park gave its memory back
// and no statement has run since.
func (s *DB) Quiet() bool { return s.quiet }

// Memory is what a database holds in memory, as SQLite counts it (sqlite3_db_status): its page
// cache, its prepared statements, and the lookaside slots in use.
type Memory struct{ Cache, Stmts, Lookaside int }

// Memory returns what the database holds in memory now.
func (s *DB) Memory() (Memory, error) {
	var m Memory
	if s.parked {
		return m, nil
	}
	err := s.conn.Raw(func(dc any) error {
		st, ok := dc.(sqlite.DBStatus)
		if !ok {
			return fmt.Errorf("sqlite driver has no status")
		}
		var err error
		for _, c := range []struct {
			op  sqlite.DBStatusOp
			out *int
		}{{sqlite.DBStatusCacheUsed, &m.Cache}, {sqlite.DBStatusStmtUsed, &m.Stmts}, {sqlite.DBStatusLookasideUsed, &m.Lookaside}} {
			if *c.out, _, err = st.Status(c.op, false); err != nil {
				return err
			}
		}
		return nil
	})
	return m, err
}
