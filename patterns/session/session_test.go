package session_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// No goroutine outlives the runtimes the tests and examples close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logs collects the JSON records of a slog.Logger.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// record is one log record: its (bubble) time and the object it names.
type record struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	Do    string    `json:"do"`
}

// events returns the records whose event is event.
func (l *logs) events(t testing.TB, event string) []record {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []record
	dec := json.NewDecoder(bytes.NewReader(l.buf.Bytes()))
	for dec.More() {
		var r record
		require.NoError(t, dec.Decode(&r))
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// sessions is a runtime with a "sessions" namespace, for one test.
type sessions struct {
	rt   *core.Runtime
	ns   *core.Namespace[*session.Session]
	logs *logs
}

// openSessions opens a runtime over dir ("" for a private one) and
// registers sessions with opts; logs go to l.
func openSessions(t testing.TB, dir string, opts session.Options, l *logs) *sessions {
	t.Helper()
	return openSessionsWith(t, core.Options{Dir: dir}, opts, l)
}

// openSessionsWith is openSessions with the runtime's options.
func openSessionsWith(t testing.TB, copts core.Options, opts session.Options, l *logs) *sessions {
	t.Helper()
	copts.Synchronous = "NORMAL"
	rt, err := core.Open(copts)
	require.NoError(t, err)
	opts.Logger = l.logger()
	ns, err := core.Register(rt, "sessions", opts.New)
	require.NoError(t, err)
	return &sessions{rt: rt, ns: ns, logs: l}
}

func (s *sessions) do(t testing.TB, id string, fn func(context.Context, *session.Session) error) {
	t.Helper()
	stub, err := s.ns.Get(id)
	require.NoError(t, err)
	require.NoError(t, core.Do(context.Background(), stub, fn))
}

func (s *sessions) set(t testing.TB, id, key, value string) {
	t.Helper()
	s.do(t, id, func(ctx context.Context, ss *session.Session) error { return ss.Set(ctx, key, []byte(value)) })
}

func (s *sessions) touch(t testing.TB, id string) time.Time {
	t.Helper()
	var at time.Time
	s.do(t, id, func(ctx context.Context, ss *session.Session) error {
		var err error
		at, err = ss.Touch(ctx)
		return err
	})
	return at
}

// get returns the value under key, or the error Get returned.
func (s *sessions) get(t testing.TB, id, key string) (string, error) {
	t.Helper()
	stub, err := s.ns.Get(id)
	require.NoError(t, err)
	v, err := core.Call(context.Background(), stub, func(ctx context.Context, ss *session.Session) ([]byte, error) { return ss.Get(ctx, key) })
	return string(v), err
}

func (s *sessions) deadline(t testing.TB, id string) (time.Time, bool) {
	t.Helper()
	var at time.Time
	var ok bool
	s.do(t, id, func(ctx context.Context, ss *session.Session) error {
		var err error
		at, ok, err = ss.Deadline(ctx)
		return err
	})
	return at, ok
}

// S-SE1, S-A2, S-A15: an untouched session is there until its TTL is up and
// gone from the deadline on; its alarm ran exactly then, once, and left no
// alarm behind.
func TestSession_UntouchedExpiresAfterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openSessions(t, "", session.Options{}, &logs{})
		defer s.rt.Close()
		t0 := time.Now()
		s.set(t, "sid", "user", "ada")
		at, ok := s.deadline(t, "sid")
		require.True(t, ok)
		require.Equal(t, t0.Add(session.DefaultTTL), at, "default TTL is 30 min")

		time.Sleep(session.DefaultTTL - time.Millisecond)
		synctest.Wait()
		got, err := s.get(t, "sid", "user")
		require.NoError(t, err, "1 ms before the deadline")
		require.Equal(t, "ada", got)
		require.Empty(t, s.logs.events(t, "session_expired"))

		time.Sleep(time.Millisecond)
		synctest.Wait()
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "at the deadline")
		_, ok = s.deadline(t, "sid")
		require.False(t, ok)
		fired := s.logs.events(t, "session_expired")
		require.Len(t, fired, 1)
		require.Equal(t, session.DefaultTTL, fired[0].Time.Sub(t0), "the alarm ran at the deadline")
		require.Equal(t, "sid", fired[0].Do)
		require.EqualValues(t, 0, s.rt.Stats().Alarms, "S-A15: nothing re-armed")

		time.Sleep(time.Hour)
		synctest.Wait()
		require.Len(t, s.logs.events(t, "session_expired"), 1, "S-A15: the alarm does not repeat")
	})
}

// S-SE1, S-A1: each Touch moves the one alarm to now + TTL, so a touched
// session outlives its first deadline and ends TTL after the last touch.
func TestSession_TouchExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openSessions(t, "", session.Options{TTL: 10 * time.Minute}, &logs{})
		defer s.rt.Close()
		t0 := time.Now()
		s.set(t, "sid", "cart", "3 books")
		for i := 1; i <= 3; i++ {
			time.Sleep(8 * time.Minute)
			at := s.touch(t, "sid")
			require.Equal(t, t0.Add(time.Duration(8*i+10)*time.Minute), at, "touch %d", i)
		}
		require.EqualValues(t, 1, s.rt.Stats().Alarms, "S-A1: one alarm, moved")

		time.Sleep(10*time.Minute - time.Millisecond) // t0+34m: long past the first deadline (t0+10m)
		synctest.Wait()
		got, err := s.get(t, "sid", "cart")
		require.NoError(t, err)
		require.Equal(t, "3 books", got)
		require.Empty(t, s.logs.events(t, "session_expired"), "no alarm ran at the old deadlines")

		time.Sleep(time.Millisecond)
		synctest.Wait()
		_, err = s.get(t, "sid", "cart")
		require.ErrorIs(t, err, session.ErrNotFound)
		fired := s.logs.events(t, "session_expired")
		require.Len(t, fired, 1)
		require.Equal(t, 34*time.Minute, fired[0].Time.Sub(t0), "TTL after the last touch")
	})
}

// S-SE1: the alarm deleted the data: a session started again under the
// same id is empty. Get does not extend the session; Set does.
func TestSession_ExpiredDataDoesNotComeBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openSessions(t, "", session.Options{TTL: time.Minute}, &logs{})
		defer s.rt.Close()
		s.set(t, "sid", "user", "ada")
		for range 3 {
			time.Sleep(30 * time.Second)
			s.get(t, "sid", "user") // reads do not extend
		}
		synctest.Wait()
		require.Len(t, s.logs.events(t, "session_expired"), 1)

		s.set(t, "sid", "theme", "dark")
		_, err := s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "the old data is gone")
		got, err := s.get(t, "sid", "theme")
		require.NoError(t, err)
		require.Equal(t, "dark", got)
	})
}

// The session keeps time by the runtime's clock (Options.Now), the clock
// its alarm is due by, never by time.Now. With that clock 3 h ahead of
// time.Now, a session still ends TTL after its Set by that clock: its
// deadline is now + TTL on it, the alarm waits for the deadline, and at the
// deadline the alarm runs and deletes the data.
func TestSession_ShiftedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shift = 3 * time.Hour
		now := func() time.Time { return time.Now().Add(shift) }
		s := openSessionsWith(t, core.Options{Now: now}, session.Options{}, &logs{})
		defer s.rt.Close()
		t0 := time.Now()
		s.set(t, "sid", "user", "ada")
		at, ok := s.deadline(t, "sid")
		require.True(t, ok)
		require.Equal(t, t0.Add(shift+session.DefaultTTL), at, "now + TTL, by the runtime's clock")

		time.Sleep(session.DefaultTTL - time.Millisecond)
		synctest.Wait()
		require.EqualValues(t, 1, s.rt.Stats().Alarms, "the alarm waits for the deadline")
		got, err := s.get(t, "sid", "user")
		require.NoError(t, err, "1 ms before the deadline")
		require.Equal(t, "ada", got)

		time.Sleep(time.Millisecond)
		synctest.Wait()
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "at the deadline")
		fired := s.logs.events(t, "session_expired")
		require.Len(t, fired, 1, "the alarm ran and deleted the session")
		require.Equal(t, session.DefaultTTL, fired[0].Time.Sub(t0), "at the deadline")
		require.EqualValues(t, 0, s.rt.Stats().Alarms)
	})
}

// End is a logout: data, deadline and alarm go at once.
func TestSession_End(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openSessions(t, "", session.Options{}, &logs{})
		defer s.rt.Close()
		s.set(t, "sid", "user", "ada")
		s.set(t, "sid", "theme", "dark")
		s.do(t, "sid", func(ctx context.Context, ss *session.Session) error { return ss.Delete(ctx, "theme") })
		_, err := s.get(t, "sid", "theme")
		require.ErrorIs(t, err, session.ErrNotFound, "deleted key")
		_, err = s.get(t, "sid", "user")
		require.NoError(t, err, "other keys stay")

		s.do(t, "sid", func(ctx context.Context, ss *session.Session) error { return ss.End(ctx) })
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound)
		_, ok := s.deadline(t, "sid")
		require.False(t, ok)
		require.EqualValues(t, 0, s.rt.Stats().Alarms)
		_, err = s.get(t, "never", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "unknown session")
	})
}

// S-SE1, S-A7: data and deadline survive a restart; the alarm fires in the
// new runtime at the deadline set in the old one, on an object it has to
// wake first.
func TestSession_SurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l := &logs{}
		s := openSessions(t, dir, session.Options{}, l)
		t0 := time.Now()
		s.set(t, "sid", "user", "ada")
		require.NoError(t, s.rt.Close())

		time.Sleep(10 * time.Minute)
		s = openSessions(t, dir, session.Options{}, l)
		require.EqualValues(t, 1, s.rt.Stats().Alarms, "the alarm came back")
		got, err := s.get(t, "sid", "user")
		require.NoError(t, err)
		require.Equal(t, "ada", got)

		time.Sleep(20 * time.Minute)
		synctest.Wait()
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound)
		fired := l.events(t, "session_expired")
		require.Len(t, fired, 1)
		require.Equal(t, 30*time.Minute, fired[0].Time.Sub(t0), "the deadline set before the restart")

		stub, err := s.ns.Get("sid")
		require.NoError(t, err)
		require.NoError(t, s.rt.Close())
		require.Equal(t, 0, countOnDisk(t, dir, "sessions", stub.ID(), "SELECT count(*) FROM session_data"), "deleted, not just hidden")
	})
}

// S-A12: a session whose deadline passed while the runtime was down is gone
// at once on restart, before or after its overdue alarm runs; a Touch then
// starts an empty session.
func TestSession_DeadlinePassedWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l := &logs{}
		s := openSessions(t, dir, session.Options{}, l)
		s.set(t, "sid", "user", "ada")
		require.NoError(t, s.rt.Close())

		time.Sleep(time.Hour)
		s = openSessions(t, dir, session.Options{}, l)
		defer s.rt.Close()
		_, err := s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound)
		s.touch(t, "sid")
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "a touch does not revive expired data")
	})
}

// countOnDisk runs a count query on an object's database file, as an
// operator could once the runtime is closed.
func countOnDisk(t testing.TB, dir, ns, id, query string) int {
	t.Helper()
	path := filepath.Join(dir, ns, id+".sqlite")
	_, err := os.Stat(path)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRow(query).Scan(&n))
	return n
}

// slow is an object whose alarm takes an hour. In a runtime with
// AlarmConcurrency 1 it holds the only alarm slot meanwhile, so every other
// alarm due then runs late.
type slow struct{}

func (slow) Alarm(context.Context, core.AlarmInfo) error {
	time.Sleep(time.Hour)
	return nil
}

// S-A12: alarms can run late (here by an hour, queued behind a slow one).
// A session past its deadline is gone all the same, a Touch starts it empty
// rather than reviving it, and an expired link is expired; the late alarms
// run when they can and change nothing a user sees.
func TestSession_LateAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &logs{}
		rt, err := core.Open(core.Options{AlarmConcurrency: 1, AlarmTimeout: 2 * time.Hour, Synchronous: "NORMAL"})
		require.NoError(t, err)
		defer rt.Close()
		var sts []*core.State
		slowNS, err := core.Register(rt, "slow", func(_ context.Context, st *core.State) (slow, error) { sts = append(sts, st); return slow{}, nil })
		require.NoError(t, err)
		sessNS, err := core.Register(rt, "sessions", session.Options{TTL: 10 * time.Minute, Logger: l.logger()}.New)
		require.NoError(t, err)
		s := &sessions{rt: rt, ns: sessNS, logs: l}
		k := &links{rt: rt, ns: mustRegisterLinks(t, rt, l), logs: l}

		t0 := time.Now()
		s.set(t, "sid", "user", "ada")
		require.NoError(t, k.create(t, "abc", "https://example.com/a", t0.Add(10*time.Minute)))
		stub, err := slowNS.Get("slow")
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), stub, func(ctx context.Context, _ slow) error {
			return sts[0].SetAlarm(ctx, t0.Add(5*time.Minute)) // busy from t0+5m to t0+65m
		}))

		time.Sleep(20 * time.Minute)
		synctest.Wait()
		require.Empty(t, l.events(t, "session_expired"), "the alarm is late")
		require.Empty(t, l.events(t, "link_expired"), "the alarm is late")
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "past the deadline")
		_, err = k.resolve(t, "abc")
		require.ErrorIs(t, err, session.ErrExpired, "past the expiry")
		s.touch(t, "sid")
		_, err = s.get(t, "sid", "user")
		require.ErrorIs(t, err, session.ErrNotFound, "a touch does not revive expired data")
		s.set(t, "sid", "theme", "dark")

		for range 10 { // keep the new session alive past the slow alarm (t0+65m)
			time.Sleep(5 * time.Minute)
			s.touch(t, "sid")
		}
		synctest.Wait()
		fired := l.events(t, "link_expired")
		require.Len(t, fired, 1)
		require.Equal(t, 65*time.Minute, fired[0].Time.Sub(t0), "ran 55 minutes late")
		require.Empty(t, l.events(t, "session_expired"), "the late alarm did not end the new session")
		got, err := s.get(t, "sid", "theme")
		require.NoError(t, err)
		require.Equal(t, "dark", got)

		time.Sleep(10 * time.Minute)
		synctest.Wait()
		expired := l.events(t, "session_expired")
		require.Len(t, expired, 1)
		require.Equal(t, 80*time.Minute, expired[0].Time.Sub(t0), "TTL after the last touch")
	})
}

func mustRegisterLinks(t testing.TB, rt *core.Runtime, l *logs) *core.Namespace[*session.Link] {
	t.Helper()
	ns, err := core.Register(rt, "links", session.Options{Logger: l.logger()}.NewLink)
	require.NoError(t, err)
	return ns
}
