// Package session is exercise 3 of the workshop: things that end at a time
// of their own (the original, SEMANTICS SE1, A16). One object stands
// for one user session: byte values by key that live until TTL after the
// last Touch or Set. The session's deadline is stored with its data and
// mirrored in the object's alarm, which deletes the data when the deadline
// comes: nothing ever scans a table of sessions to find the expired ones.
//
// Fill in the TODOs, then check your answer:
//
//	go test -tags exercises ./exercises/session
//
// Three things to get right:
//
//   - The stored deadline is the truth, the alarm is the janitor. An alarm
//     may run late (the runtime was down, a retry), so Get and Deadline
//     compare the stored deadline with the clock.
//   - The clock is the runtime's, s.st.Now() (core.Options.Now): the one
//     the alarm is due by. Never time.Now: with a shifted Options.Now the
//     deadline and the alarm would disagree by hours.
//   - Touch and Set re-arm the alarm at the new deadline: for a TTL,
//     re-arming on every event is the point.
//   - The constructor runs on every activation (after every eviction):
//     it creates tables and nothing else. A SetAlarm there would move the
//     pending expiry each time the object wakes (A16).
//
// The reference solution is package patterns/session; the tests run
// against it with -tags 'exercises solution'.
package session

import (
	"context"
	"errors"
	"time"

	"github.com/durable-go/durable/core"
)

// DefaultTTL is how long a session lives after its last Touch or Set.
const DefaultTTL = 30 * time.Minute

// ErrNotFound is returned, wrapped or not, by Get when the session has no
// value under the key: never set, deleted, or the session expired.
var ErrNotFound = errors.New("session: not found")

var errTODO = errors.New("session: not implemented yet (see the TODO)")

// Options configure Session objects. The zero value is ready to use.
type Options struct {
	TTL time.Duration // default DefaultTTL
}

// Session is one user session. Its methods run as turns of its object
// (core.Call, core.Do); the runtime calls Alarm.
type Session struct {
	st  *core.State
	ttl time.Duration
}

// New is the constructor with the default options, for core.Register.
func New(ctx context.Context, st *core.State) (*Session, error) { return Options{}.New(ctx, st) }

// New is the constructor with these options, for core.Register. It runs as
// the object's first turn; ctx is that turn's, and every storage or alarm
// call takes it (st.Storage().Exec(ctx, ...), s.st.SetAlarm(ctx, t)).
func (o Options) New(ctx context.Context, st *core.State) (*Session, error) {
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	// TODO: create your tables (the values, the deadline) if they do not
	// exist. Nothing else: no SetAlarm here.
	return &Session{st: st, ttl: ttl}, nil
}

// Touch extends the session to now + TTL and returns the new deadline. It
// starts an empty session if there is none.
func (s *Session) Touch(ctx context.Context) (time.Time, error) {
	// TODO: store the deadline and set the alarm for it.
	return time.Time{}, errTODO
}

// Set stores value under key and extends the session as Touch does.
func (s *Session) Set(ctx context.Context, key string, value []byte) error {
	// TODO
	return errTODO
}

// Get returns the value stored under key, or ErrNotFound. It does not
// extend the session.
func (s *Session) Get(ctx context.Context, key string) ([]byte, error) {
	// TODO: a session past its stored deadline has no values, whether or
	// not its alarm has run.
	return nil, errTODO
}

// Deadline returns when the session expires, and false if there is no
// live session.
func (s *Session) Deadline(ctx context.Context) (time.Time, bool, error) {
	// TODO
	return time.Time{}, false, errTODO
}

// End deletes the session now (a logout): its data, its deadline and its
// alarm.
func (s *Session) End(ctx context.Context) error {
	// TODO
	return errTODO
}

// Alarm deletes the session's data and deadline once the deadline has
// come. Empty the tables rather than calling Storage.DeleteAll, which would
// drop them under the object still in memory.
func (s *Session) Alarm(ctx context.Context, info core.AlarmInfo) error {
	// TODO: the alarm may be early or stale (a Touch moved the deadline):
	// delete only if the stored deadline has come.
	return errTODO
}
