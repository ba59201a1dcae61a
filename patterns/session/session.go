package session

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
)

// DefaultTTL is how long a session lives after its last Touch or Set
// (SEMANTICS SE1).
const DefaultTTL = 30 * time.Minute

// Options configure Session and Link objects. The zero value is ready to
// use.
type Options struct {
	// TTL is how long a session lives after its last Touch or Set (default
	// DefaultTTL). Links ignore it: each link has its own expiry.
	TTL time.Duration

	// Logger receives a Debug record (event=session_expired or
	// event=link_expired) each time an alarm ends a session or a link
	// (default slog.Default()).
	Logger *slog.Logger
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// A Session is one user session: byte values by key that live until TTL
// after the last Touch or Set. The session's deadline is stored with its
// data and mirrored in the object's alarm, which deletes the data when the
// deadline comes. Register it with core.Register(rt, "sessions",
// session.New), one object per session id.
//
// Methods must be called inside a turn of the object (core.Call, core.Do),
// with the turn's ctx; elsewhere they fail with core.ErrNotInTurn. The time
// is the runtime's clock (State.Now, which is core.Options.Now).
type Session struct {
	st  *core.State
	ttl time.Duration
	log *slog.Logger
}

// sessionMigrations is the session's schema, in order; step 1 is what the
// constructor ran before it used migrations.
var sessionMigrations = []core.Migration{
	core.SQL(`CREATE TABLE IF NOT EXISTS session_data(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_deadline(id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL)`),
}

// New is the Session constructor with the default options, for
// core.Register.
func New(ctx context.Context, st *core.State) (*Session, error) { return Options{}.New(ctx, st) }

// New is the Session constructor with these options, for core.Register.
func (o Options) New(ctx context.Context, st *core.State) (*Session, error) {
	// Tables only. The constructor runs on every activation, so arming the
	// alarm here would postpone a pending expiry each time (A16).
	if err := st.Storage().Migrate(ctx, sessionMigrations...); err != nil {
		return nil, err
	}
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Session{st: st, ttl: ttl, log: o.logger()}, nil
}

// Touch extends the session to now + TTL, by the runtime's clock
// (State.Now), and returns the new deadline. It starts an empty session if
// there is none. Each Touch writes two rows: the deadline and the alarm.
func (s *Session) Touch(ctx context.Context) (time.Time, error) {
	now := s.st.Now()
	if err := s.expireIfDue(ctx, now); err != nil {
		return time.Time{}, err
	}
	return s.extend(ctx, now)
}

// extend moves the deadline to now + TTL and re-arms the alarm for it.
// Re-arming on every touch is the point of a TTL; a debounced flush must
// not do it (see package counter).
func (s *Session) extend(ctx context.Context, now time.Time) (time.Time, error) {
	at := now.Add(s.ttl)
	_, err := s.st.Storage().Exec(ctx, `INSERT INTO session_deadline(id, at) VALUES (1, ?)
ON CONFLICT(id) DO UPDATE SET at = excluded.at`, at.UnixNano())
	if err != nil {
		return time.Time{}, err
	}
	return at, s.st.SetAlarm(ctx, at)
}

// Get returns the value stored under key, or ErrNotFound. It does not
// extend the session.
func (s *Session) Get(ctx context.Context, key string) ([]byte, error) {
	live, err := s.live(ctx, s.st.Now())
	if err != nil {
		return nil, err
	}
	if !live {
		return nil, ErrNotFound
	}
	var v []byte
	err = s.st.Storage().QueryRow(ctx, "SELECT value FROM session_data WHERE key = ?", key).Scan(&v)
	if errors.Is(err, core.ErrNoRows) {
		return nil, ErrNotFound
	}
	return v, err
}

// Set stores value under key and extends the session as Touch does, so that
// no data is ever stored without a deadline.
func (s *Session) Set(ctx context.Context, key string, value []byte) error {
	now := s.st.Now()
	if err := s.expireIfDue(ctx, now); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	_, err := s.st.Storage().Exec(ctx, `INSERT INTO session_data(key, value) VALUES (?, ?)
ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return err
	}
	_, err = s.extend(ctx, now)
	return err
}

// Delete removes the value under key, if any. It does not extend the
// session.
func (s *Session) Delete(ctx context.Context, key string) error {
	_, err := s.st.Storage().Exec(ctx, "DELETE FROM session_data WHERE key = ?", key)
	return err
}

// End deletes the session now (a logout): its data, its deadline and its
// alarm.
func (s *Session) End(ctx context.Context) error {
	if err := s.clear(ctx); err != nil {
		return err
	}
	return s.st.DeleteAlarm(ctx)
}

// Deadline returns when the session expires, and false if there is no live
// session.
func (s *Session) Deadline(ctx context.Context) (time.Time, bool, error) {
	at, ok, err := s.deadline(ctx)
	if err != nil || !ok || !s.st.Now().Before(at) {
		return time.Time{}, false, err
	}
	return at, true, nil
}

// Alarm deletes the session's data once its deadline has come. The runtime
// calls it; the object's one alarm always points at the deadline.
func (s *Session) Alarm(ctx context.Context, info core.AlarmInfo) error {
	at, ok, err := s.deadline(ctx)
	if err != nil || !ok {
		return err // ended meanwhile: nothing to delete
	}
	if s.st.Now().Before(at) {
		return nil // not due (a Touch re-armed the alarm for the new deadline)
	}
	if err := s.clear(ctx); err != nil {
		return err
	}
	s.log.DebugContext(ctx, "session expired", "event", "session_expired", "do", s.st.Name(), "deadline", at)
	return nil
}

// deadline returns the stored deadline, and false if there is none.
func (s *Session) deadline(ctx context.Context) (time.Time, bool, error) {
	var at int64
	err := s.st.Storage().QueryRow(ctx, "SELECT at FROM session_deadline WHERE id = 1").Scan(&at)
	switch {
	case errors.Is(err, core.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, err
	}
	return time.Unix(0, at), true, nil
}

// live reports whether the session exists at now. The stored deadline is
// the truth, not the alarm: an alarm may run late (the runtime was down, a
// retry, SEMANTICS A12), and a session past its deadline is gone even if
// its alarm has not run yet.
func (s *Session) live(ctx context.Context, now time.Time) (bool, error) {
	at, ok, err := s.deadline(ctx)
	return ok && now.Before(at), err
}

// expireIfDue deletes the data of a session whose deadline has passed but
// whose alarm has not run yet, so that a Touch or Set never brings it back.
func (s *Session) expireIfDue(ctx context.Context, now time.Time) error {
	at, ok, err := s.deadline(ctx)
	if err != nil || !ok || now.Before(at) {
		return err
	}
	return s.clear(ctx)
}

// clear deletes the session's data and deadline. It empties the tables
// rather than calling Storage.DeleteAll, which would drop them (and the
// resident object's next Set would fail).
func (s *Session) clear(ctx context.Context) error {
	_, err := s.st.Storage().Exec(ctx, "DELETE FROM session_data; DELETE FROM session_deadline")
	return err
}
