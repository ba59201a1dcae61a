//go:build exercises

package session_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

const ttl = 30 * time.Minute

// env is a runtime with one namespace of sessions. It keeps each object's
// latest State, so that a test can look at what the object stored.
type env struct {
	rt     *core.Runtime
	ns     *core.Namespace[*Session]
	mu     sync.Mutex // protects states
	states map[string]*core.State
}

func open(t *testing.T, opts core.Options) *env {
	t.Helper()
	e := &env{rt: coretest.Open(t, opts), states: map[string]*core.State{}}
	ctor := newSession(ttl)
	var err error
	e.ns, err = core.Register(e.rt, "sessions", func(ctx context.Context, st *core.State) (*Session, error) {
		e.mu.Lock()
		e.states[st.Name()] = st
		e.mu.Unlock()
		return ctor(ctx, st)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) stub(t *testing.T, id string) *core.Stub[*Session] {
	t.Helper()
	s, err := e.ns.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func set(t *testing.T, s *core.Stub[*Session], key, value string) {
	t.Helper()
	if err := core.Do(t.Context(), s, func(ctx context.Context, x *Session) error { return x.Set(ctx, key, []byte(value)) }); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func get(t *testing.T, s *core.Stub[*Session], key string) (string, error) {
	t.Helper()
	v, err := core.Call(t.Context(), s, func(ctx context.Context, x *Session) ([]byte, error) { return x.Get(ctx, key) })
	return string(v), err
}

func deadline(t *testing.T, s *core.Stub[*Session]) (time.Time, bool) {
	t.Helper()
	type dl struct {
		at time.Time
		ok bool
	}
	d, err := core.Call(t.Context(), s, func(ctx context.Context, x *Session) (dl, error) {
		at, ok, err := x.Deadline(ctx)
		return dl{at, ok}, err
	})
	if err != nil {
		t.Fatalf("Deadline: %v", err)
	}
	return d.at, d.ok
}

// stored counts the rows in the object's own tables and its KV pairs:
// what is left of the session on disk.
func (e *env) stored(t *testing.T, s *core.Stub[*Session]) int {
	t.Helper()
	n, err := core.Call(t.Context(), s, func(ctx context.Context, _ *Session) (int, error) {
		e.mu.Lock()
		st := e.states[s.Name()]
		e.mu.Unlock()
		db := st.Storage()
		rows, err := db.Query(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'")
		if err != nil {
			return 0, err
		}
		var tables []string
		for rows.Next() {
			var name string
			rows.Scan(&name)
			tables = append(tables, name)
		}
		rows.Close()
		total := 0
		for _, tab := range tables {
			var c int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM "`+strings.ReplaceAll(tab, `"`, `""`)+`"`).Scan(&c); err != nil {
				return 0, err
			}
			total += c
		}
		kv, err := db.List(ctx, core.ListOptions{})
		return total + len(kv), err
	})
	if err != nil {
		t.Fatalf("reading the object's storage: %v", err)
	}
	return n
}

func TestSession_SetThenGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		if v, err := get(t, s, "user"); err != nil || v != "ada" {
			t.Errorf("Get(user): got %q, %v; want ada", v, err)
		}
		if _, err := get(t, s, "cart"); !errors.Is(err, errNotFound) {
			t.Errorf("Get(cart), never set: got %v, want ErrNotFound", err)
		}
		if _, err := get(t, e.stub(t, "sess-2"), "user"); !errors.Is(err, errNotFound) {
			t.Errorf("Get on another session: got %v, want ErrNotFound", err)
		}
	})
}

// SEMANTICS SE1: a session lives TTL after its last Touch or Set.
func TestSession_LivesTTLAfterTheLastTouch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		if at, ok := deadline(t, s); !ok || !at.Equal(time.Now().Add(ttl)) {
			t.Errorf("Deadline after Set: got %v %t, want now+30m", at, ok)
		}
		time.Sleep(20 * time.Minute)
		at, err := core.Call(t.Context(), s, func(ctx context.Context, x *Session) (time.Time, error) { return x.Touch(ctx) })
		if err != nil || !at.Equal(time.Now().Add(ttl)) {
			t.Fatalf("Touch: got %v, %v; want now+30m", at, err)
		}
		time.Sleep(25 * time.Minute) // 45 min after the Set, 25 after the Touch
		if v, err := get(t, s, "user"); err != nil || v != "ada" {
			t.Errorf("25 min after a Touch: got %q, %v; want ada", v, err)
		}
		time.Sleep(6 * time.Minute) // 31 min after the Touch
		if _, err := get(t, s, "user"); !errors.Is(err, errNotFound) {
			t.Errorf("31 min after the Touch: got %v, want ErrNotFound", err)
		}
		if _, ok := deadline(t, s); ok {
			t.Error("Deadline after expiry: still live")
		}
	})
}

func TestSession_GetDoesNotExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		time.Sleep(20 * time.Minute)
		get(t, s, "user")
		time.Sleep(11 * time.Minute)
		if _, err := get(t, s, "user"); !errors.Is(err, errNotFound) {
			t.Errorf("31 min after the Set, with a Get in between: got %v, want ErrNotFound", err)
		}
	})
}

// The alarm is set at the deadline and deletes everything then, even if
// nobody asks for the session again.
func TestSession_TheAlarmDeletesTheData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		set(t, s, "cart", "3 books")
		if got := e.rt.Stats().Alarms; got != 1 {
			t.Fatalf("alarms pending after Set: got %d, want 1", got)
		}
		time.Sleep(ttl - time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Alarms; got != 1 {
			t.Errorf("alarms pending a second before the deadline: got %d, want 1", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Alarms; got != 0 {
			t.Errorf("alarms pending after the deadline: got %d, want 0 (the alarm ran)", got)
		}
		if n := e.stored(t, s); n != 0 {
			t.Errorf("after the alarm, the object still stores %d rows (values, deadline): want 0", n)
		}
	})
}

// The session keeps time by the runtime's clock (core.Options.Now, which
// the object reads as st.Now()), the clock its alarm is due by. Here that
// clock is 3 h ahead of time.Now; the session must behave exactly as on an
// unshifted one.
func TestSession_KeepsTheRuntimesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shift = 3 * time.Hour
		e := open(t, core.Options{Now: func() time.Time { return time.Now().Add(shift) }})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		if at, ok := deadline(t, s); !ok || !at.Equal(time.Now().Add(shift+ttl)) {
			t.Errorf("Deadline after Set: got %v %t, want the runtime's now + 30m (take the time from st.Now(), not time.Now())", at, ok)
		}
		time.Sleep(ttl - time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Alarms; got != 1 {
			t.Errorf("alarms pending a second before the deadline: got %d, want 1 (an alarm set from time.Now is hours early by the runtime's clock)", got)
		}
		if v, err := get(t, s, "user"); err != nil || v != "ada" {
			t.Errorf("a second before the deadline: got %q, %v; want ada", v, err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Alarms; got != 0 {
			t.Errorf("alarms pending after the deadline: got %d, want 0 (the alarm ran)", got)
		}
		if n := e.stored(t, s); n != 0 {
			t.Errorf("after the deadline the object still stores %d rows: want 0 (the alarm deletes them)", n)
		}
	})
}

// SEMANTICS A16: waking the object (the constructor runs again) must not
// move the pending expiry.
func TestSession_WakingDoesNotMoveTheAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{IdleTimeout: 10 * time.Second})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		want, _ := deadline(t, s)
		before := e.rt.Stats().Constructs
		for range 3 { // evicted, then woken by a read
			time.Sleep(5 * time.Minute)
			if at, ok := deadline(t, s); !ok || !at.Equal(want) {
				t.Errorf("Deadline after a wake: got %v %t, want %v", at, ok, want)
			}
		}
		if e.rt.Stats().Constructs == before {
			t.Fatal("the object was never evicted and rebuilt")
		}
		time.Sleep(time.Until(want) + time.Second)
		synctest.Wait()
		if got := e.rt.Stats().Alarms; got != 0 {
			t.Errorf("a second after the deadline %d alarm(s) still pending: the constructor moved it", got)
		}
	})
}

func TestSession_EndDeletesNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := open(t, core.Options{})
		s := e.stub(t, "sess-1")
		set(t, s, "user", "ada")
		if err := core.Do(t.Context(), s, func(ctx context.Context, x *Session) error { return x.End(ctx) }); err != nil {
			t.Fatalf("End: %v", err)
		}
		if _, err := get(t, s, "user"); !errors.Is(err, errNotFound) {
			t.Errorf("Get after End: got %v, want ErrNotFound", err)
		}
		if _, ok := deadline(t, s); ok {
			t.Error("Deadline after End: still live")
		}
		if got := e.rt.Stats().Alarms; got != 0 {
			t.Errorf("alarms pending after End: got %d, want 0", got)
		}
		if n := e.stored(t, s); n != 0 {
			t.Errorf("after End the object still stores %d rows", n)
		}
	})
}

func TestSession_SurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	for run, want := range []string{"", "ada"} {
		rt, err := core.Open(core.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := core.Register(rt, "sessions", newSession(ttl))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := ns.Get("sess-1")
		if run == 0 {
			set(t, s, "user", "ada")
		} else if v, err := get(t, s, "user"); err != nil || v != want {
			t.Errorf("after a restart: got %q, %v; want %q", v, err, want)
		}
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
