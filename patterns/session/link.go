package session

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/durable-go/durable/core"
)

// A Link is one short link with an optional expiry: the object's name is
// the link's code, Resolve returns its target until the expiry and
// ErrExpired from then on. When the link has an expiry, its alarm is set
// for it, and the alarm erases the target (SEMANTICS SE2): each link knows
// its own deadline, so nothing scans a table of links to find the expired
// ones. Register it with core.Register(rt, "links", session.NewLink).
//
// Methods must be called inside a turn of the object (core.Call, core.Do),
// with the turn's ctx; elsewhere they fail with core.ErrNotInTurn. The
// expiry is compared with the runtime's clock (State.Now).
type Link struct {
	st  *core.State
	log *slog.Logger
}

// expires_at is NULL for a link that never expires; target is NULL once
// the alarm has expired the link (the row stays, so the code is not reused).
// Step 1 is what the constructor ran before it used migrations.
var linkMigrations = []core.Migration{
	core.SQL(`CREATE TABLE IF NOT EXISTS link(id INTEGER PRIMARY KEY CHECK (id = 1), target TEXT, expires_at INTEGER)`),
}

// NewLink is the Link constructor with the default options, for
// core.Register.
func NewLink(ctx context.Context, st *core.State) (*Link, error) { return Options{}.NewLink(ctx, st) }

// NewLink is the Link constructor with these options, for core.Register.
func (o Options) NewLink(ctx context.Context, st *core.State) (*Link, error) {
	if err := st.Storage().Migrate(ctx, linkMigrations...); err != nil {
		return nil, err
	}
	return &Link{st: st, log: o.logger()}, nil
}

// Create makes the link point at target until expiresAt, or for ever if
// expiresAt is the zero time. It fails with ErrExists if the link was
// created before.
func (l *Link) Create(ctx context.Context, target string, expiresAt time.Time) error {
	if target == "" {
		return errors.New("session: link target is empty")
	}
	var one int
	switch err := l.st.Storage().QueryRow(ctx, "SELECT 1 FROM link WHERE id = 1").Scan(&one); {
	case err == nil:
		return ErrExists
	case !errors.Is(err, core.ErrNoRows):
		return err
	}
	var exp *int64
	if !expiresAt.IsZero() {
		ns := expiresAt.UnixNano()
		exp = &ns
	}
	if _, err := l.st.Storage().Exec(ctx, "INSERT INTO link(id, target, expires_at) VALUES (1, ?, ?)", target, exp); err != nil {
		return err
	}
	if exp == nil {
		return nil
	}
	return l.st.SetAlarm(ctx, expiresAt) // the link's own deadline: no scan (SE2)
}

// Resolve returns the link's target, ErrNotFound if the link was never
// created, or ErrExpired once its expiry has come. The stored expiry is
// checked as well as the alarm's work, so a late alarm (SEMANTICS A12)
// never leaves an expired link usable.
func (l *Link) Resolve(ctx context.Context) (string, error) {
	var target *string
	var exp *int64
	err := l.st.Storage().QueryRow(ctx, "SELECT target, expires_at FROM link WHERE id = 1").Scan(&target, &exp)
	switch {
	case errors.Is(err, core.ErrNoRows):
		return "", ErrNotFound
	case err != nil:
		return "", err
	case target == nil, exp != nil && l.st.Now().UnixNano() >= *exp:
		return "", ErrExpired
	}
	return *target, nil
}

// Alarm expires the link: it erases the target and keeps the row, so that
// Resolve reports ErrExpired rather than ErrNotFound. The runtime calls it.
func (l *Link) Alarm(ctx context.Context, info core.AlarmInfo) error {
	var exp *int64
	err := l.st.Storage().QueryRow(ctx, "SELECT expires_at FROM link WHERE id = 1 AND target IS NOT NULL").Scan(&exp)
	switch {
	case errors.Is(err, core.ErrNoRows):
		return nil // no link, or already expired
	case err != nil:
		return err
	case exp == nil:
		return nil // never expires
	}
	at := time.Unix(0, *exp)
	if l.st.Now().Before(at) {
		return nil // not due: the alarm was set for something else
	}
	if _, err := l.st.Storage().Exec(ctx, "UPDATE link SET target = NULL WHERE id = 1"); err != nil {
		return err
	}
	l.log.DebugContext(ctx, "link expired", "event", "link_expired", "do", l.st.Name(), "expires_at", at)
	return nil
}
