// Package session keeps things that must end at a time of their own: a
// user session that lives until 30 minutes after its last touch, and a link
// that works until its expiry. One object stands for one session (or one
// link), and it carries its own deadline, stored beside its data and
// mirrored in the object's alarm; the invariant is that no data outlives its
// deadline, and nothing ever scans a table to find what has expired
// (SEMANTICS SE1, SE2).
//
// A Session holds byte values by key. Touch moves its deadline to now + TTL
// and re-arms the alarm there; Set does the same; the alarm deletes the
// data. A Link points at a target until its expiry; the alarm, set once
// when the link is created, erases the target, and Resolve then returns
// ErrExpired.
//
//	ns, err := core.Register(rt, "sessions", session.Options{TTL: time.Hour}.New)
//	stub, err := ns.Get(sessionID)
//	err = core.Do(ctx, stub, func(ctx context.Context, s *session.Session) error {
//		return s.Set(ctx, "user", []byte("ada"))
//	})
//
// # The deadline is the truth, the alarm is the janitor
//
// An alarm can run late: the runtime may have been down at the deadline, or
// the run may be a retry, and no scheduling precision is promised
// (SEMANTICS A12). So reads compare the stored deadline with the clock, and
// a Touch or Set past the deadline first deletes the old data; the alarm's
// job is to delete data nobody asks for again. A session expires exactly at
// its deadline whether or not its alarm has run.
//
// The clock is the runtime's, core.State.Now (core.Options.Now), the one
// alarms are due by; never time.Now. With a shifted Options.Now, deadlines
// taken from time.Now would be hours off the alarm's clock: the alarm
// would run at once, find its deadline not yet come, and never run again.
//
// # Persistence
//
// Data, deadline and alarm live in the object's own database: they survive
// eviction and restarts. An alarm that came due while the runtime was down
// runs when it starts again.
//
// # Pitfalls
//
//   - Re-arming on every event postpones the alarm for as long as events
//     keep coming. For a TTL that is the point (every Touch re-arms); for a
//     debounced flush it means the flush never happens (see package
//     counter, which arms only when no alarm is pending).
//   - A constructor that sets the alarm unconditionally moves a pending
//     deadline each time the object is woken (SEMANTICS A16). The
//     constructors here only create tables.
//   - Storage.DeleteAll in the alarm would drop the tables too, and the next
//     Set on the still-resident object would fail; the alarm empties them
//     instead.
//   - One object has one alarm (SEMANTICS A1): code that shares the object
//     must not set the alarm for something else. Keep several deadlines in a
//     table with the alarm at the nearest one.
//   - Each Touch writes two rows (deadline and alarm, SEMANTICS A11). For
//     chatty clients, touch at most once a minute: only when Deadline is
//     less than TTL minus a minute away.
//
// # From any node
//
// Define makes a session's Touch, Get, Set, Delete and End methods callable on any node of a
// cluster (core.Define): at a node that does not own the session they run at the one that does,
// where its expiry alarm runs too; errors.Is(err, ErrNotFound) holds there too.
package session
