package session

import "errors"

// Errors returned by Session and Link methods. Test for them with errors.Is.
var (
	// ErrNotFound is returned by Session.Get when the session has no value
	// under the key, because it was never set, was deleted, or the session
	// has expired; and by Link.Resolve when no link was created.
	ErrNotFound = errors.New("session: not found")

	// ErrExpired is returned by Link.Resolve once the link's expiry has
	// come. An expired link stays expired: its code is never reused.
	ErrExpired = errors.New("session: link expired")

	// ErrExists is returned by Link.Create when the link was already
	// created, expired or not.
	ErrExists = errors.New("session: link already exists")
)
