package session_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
	"github.com/stretchr/testify/require"
)

// links is a runtime with a "links" namespace, for one test.
type links struct {
	rt   *core.Runtime
	ns   *core.Namespace[*session.Link]
	logs *logs
}

func openLinks(t testing.TB, dir string, l *logs) *links {
	t.Helper()
	return openLinksWith(t, core.Options{Dir: dir}, l)
}

// openLinksWith is openLinks with the runtime's options.
func openLinksWith(t testing.TB, opts core.Options, l *logs) *links {
	t.Helper()
	opts.Synchronous = "NORMAL"
	rt, err := core.Open(opts)
	require.NoError(t, err)
	ns, err := core.Register(rt, "links", session.Options{Logger: l.logger()}.NewLink)
	require.NoError(t, err)
	return &links{rt: rt, ns: ns, logs: l}
}

func (k *links) create(t testing.TB, code, target string, expiresAt time.Time) error {
	t.Helper()
	stub, err := k.ns.Get(code)
	require.NoError(t, err)
	return core.Do(context.Background(), stub, func(ctx context.Context, l *session.Link) error {
		return l.Create(ctx, target, expiresAt)
	})
}

func (k *links) resolve(t testing.TB, code string) (string, error) {
	t.Helper()
	stub, err := k.ns.Get(code)
	require.NoError(t, err)
	return core.Call(context.Background(), stub, func(ctx context.Context, l *session.Link) (string, error) { return l.Resolve(ctx) })
}

// S-SE2: a link with an expiry arms its alarm for it; the alarm fires
// exactly then, once, and the link resolves to ErrExpired from then on.
func TestLink_ExpiresAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := openLinks(t, "", &logs{})
		defer k.rt.Close()
		t0 := time.Now()
		require.NoError(t, k.create(t, "abc", "https://example.com/a", t0.Add(time.Hour)))
		require.EqualValues(t, 1, k.rt.Stats().Alarms)

		time.Sleep(time.Hour - time.Millisecond)
		synctest.Wait()
		got, err := k.resolve(t, "abc")
		require.NoError(t, err, "1 ms before the expiry")
		require.Equal(t, "https://example.com/a", got)
		require.Empty(t, k.logs.events(t, "link_expired"))

		time.Sleep(time.Millisecond)
		synctest.Wait()
		_, err = k.resolve(t, "abc")
		require.ErrorIs(t, err, session.ErrExpired)
		fired := k.logs.events(t, "link_expired")
		require.Len(t, fired, 1)
		require.Equal(t, time.Hour, fired[0].Time.Sub(t0), "the alarm ran at the expiry")
		require.Equal(t, "abc", fired[0].Do)
		require.EqualValues(t, 0, k.rt.Stats().Alarms)

		require.ErrorIs(t, k.create(t, "abc", "https://example.com/b", time.Time{}), session.ErrExists, "an expired code is not reused")
		_, err = k.resolve(t, "abc")
		require.ErrorIs(t, err, session.ErrExpired)
	})
}

// S-SE2: each link knows its own deadline. Links created at once with
// different expiries expire one by one, each at its own time, and a link
// with no expiry arms nothing and never expires.
func TestLink_EachKnowsItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := openLinks(t, "", &logs{})
		defer k.rt.Close()
		t0 := time.Now()
		const n = 10
		for i := range n {
			require.NoError(t, k.create(t, fmt.Sprint("l", i), "https://example.com", t0.Add(time.Duration(n-i)*time.Minute)))
		}
		require.NoError(t, k.create(t, "forever", "https://example.com/f", time.Time{}))
		require.EqualValues(t, n, k.rt.Stats().Alarms, "one alarm per expiring link")

		for m := 1; m <= n; m++ {
			time.Sleep(time.Minute)
			synctest.Wait()
			_, err := k.resolve(t, fmt.Sprint("l", n-m))
			require.ErrorIs(t, err, session.ErrExpired, "minute %d: its link", m)
			if m < n {
				_, err = k.resolve(t, fmt.Sprint("l", n-m-1))
				require.NoError(t, err, "minute %d: the next link", m)
			}
		}
		fired := k.logs.events(t, "link_expired")
		require.Len(t, fired, n)
		for _, f := range fired {
			var i int
			_, err := fmt.Sscanf(f.Do, "l%d", &i)
			require.NoError(t, err)
			require.Equal(t, time.Duration(n-i)*time.Minute, f.Time.Sub(t0), "link %s", f.Do)
		}

		time.Sleep(time.Hour)
		got, err := k.resolve(t, "forever")
		require.NoError(t, err)
		require.Equal(t, "https://example.com/f", got)
		require.EqualValues(t, 0, k.rt.Stats().Alarms)
	})
}

// S-SE2, S-A7: the expiry survives a restart: the link works until its
// deadline in the new runtime, whose alarm then expires it; a link whose
// expiry passed while the runtime was down is expired at once.
func TestLink_SurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l := &logs{}
		k := openLinks(t, dir, l)
		t0 := time.Now()
		require.NoError(t, k.create(t, "soon", "https://example.com/s", t0.Add(20*time.Minute)))
		require.NoError(t, k.create(t, "later", "https://example.com/l", t0.Add(time.Hour)))
		require.NoError(t, k.rt.Close())

		time.Sleep(30 * time.Minute)
		k = openLinks(t, dir, l)
		_, err := k.resolve(t, "soon")
		require.ErrorIs(t, err, session.ErrExpired, "expired while the runtime was down")
		got, err := k.resolve(t, "later")
		require.NoError(t, err)
		require.Equal(t, "https://example.com/l", got)

		time.Sleep(30 * time.Minute)
		synctest.Wait()
		_, err = k.resolve(t, "later")
		require.ErrorIs(t, err, session.ErrExpired)
		byCode := map[string]time.Duration{}
		for _, f := range l.events(t, "link_expired") {
			byCode[f.Do] = f.Time.Sub(t0)
		}
		require.Equal(t, map[string]time.Duration{
			"soon":  30 * time.Minute, // overdue: ran when the runtime came back
			"later": time.Hour,        // on time, in the second runtime
		}, byCode)

		var ids []string
		for _, code := range []string{"soon", "later"} {
			stub, err := k.ns.Get(code)
			require.NoError(t, err)
			ids = append(ids, stub.ID())
		}
		require.NoError(t, k.rt.Close())
		for _, id := range ids {
			require.Equal(t, 0, countOnDisk(t, dir, "links", id, "SELECT count(*) FROM link WHERE target IS NOT NULL"), "the target is erased")
		}
	})
}

// A link's expiry is a time on the runtime's clock (Options.Now), which
// its alarm is due by: with that clock 3 h ahead of time.Now, a link made
// to expire in an hour by it resolves until then, and expires then.
func TestLink_ShiftedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shift = 3 * time.Hour
		now := func() time.Time { return time.Now().Add(shift) }
		k := openLinksWith(t, core.Options{Now: now}, &logs{})
		defer k.rt.Close()
		t0 := time.Now()
		require.NoError(t, k.create(t, "abc", "https://example.com/a", now().Add(time.Hour)))

		time.Sleep(time.Hour - time.Millisecond)
		synctest.Wait()
		_, err := k.resolve(t, "abc")
		require.NoError(t, err, "1 ms before the expiry")

		time.Sleep(time.Millisecond)
		synctest.Wait()
		_, err = k.resolve(t, "abc")
		require.ErrorIs(t, err, session.ErrExpired, "at the expiry")
		fired := k.logs.events(t, "link_expired")
		require.Len(t, fired, 1, "the alarm ran and erased the target")
		require.Equal(t, time.Hour, fired[0].Time.Sub(t0))
	})
}

// Bad input: an unknown code, an empty target, a second Create, an expiry
// already past.
func TestLink_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := openLinks(t, "", &logs{})
		defer k.rt.Close()
		_, err := k.resolve(t, "nope")
		require.ErrorIs(t, err, session.ErrNotFound)
		require.ErrorContains(t, k.create(t, "empty", "", time.Time{}), "target is empty")
		_, err = k.resolve(t, "empty")
		require.ErrorIs(t, err, session.ErrNotFound, "a failed Create leaves nothing")

		require.NoError(t, k.create(t, "x", "https://example.com/x", time.Time{}))
		require.ErrorIs(t, k.create(t, "x", "https://example.com/y", time.Time{}), session.ErrExists)
		got, err := k.resolve(t, "x")
		require.NoError(t, err)
		require.Equal(t, "https://example.com/x", got, "the first target stays")

		require.NoError(t, k.create(t, "past", "https://example.com/p", time.Now().Add(-time.Hour)))
		_, err = k.resolve(t, "past")
		require.ErrorIs(t, err, session.ErrExpired)
		synctest.Wait()
		require.Len(t, k.logs.events(t, "link_expired"), 1, "an expiry in the past fires at once")
	})
}
