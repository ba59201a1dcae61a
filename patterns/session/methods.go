package session

import (
	"context"
	"time"

	"github.com/durable-go/durable/core"
)

// Entry is the argument of Methods.Set: a key and its value.
type Entry struct {
	Key   string
	Value []byte
}

// Methods are a session's operations as methods callable on any node of a cluster (core.Define):
// called at a node that does not own the session's object, each runs at the node that does, where
// its expiry alarm runs too; in one process, or at the owner, it runs in place as core.Call does.
// Across nodes an error of the session's own is a *core.RemoteError carrying its message for
// which errors.Is(err, ErrNotFound) holds as it does in one process.
type Methods struct {
	Touch  func(ctx context.Context, s *core.Stub[*Session], _ struct{}) (time.Time, error)
	Get    func(ctx context.Context, s *core.Stub[*Session], key string) ([]byte, error)
	Set    func(ctx context.Context, s *core.Stub[*Session], e Entry) (struct{}, error)
	Delete func(ctx context.Context, s *core.Stub[*Session], key string) (struct{}, error)
	End    func(ctx context.Context, s *core.Stub[*Session], _ struct{}) (struct{}, error)
}

// Define defines a session's methods on sessions, once per namespace, on every node alike.
func Define(sessions *core.Namespace[*Session]) (*Methods, error) {
	var m Methods
	var err error
	if m.Touch, err = core.Define(sessions, "touch", func(ctx context.Context, s *Session, _ struct{}) (time.Time, error) {
		return s.Touch(ctx)
	}); err != nil {
		return nil, err
	}
	if m.Get, err = core.Define(sessions, "get", func(ctx context.Context, s *Session, key string) ([]byte, error) {
		return s.Get(ctx, key)
	}, ErrNotFound); err != nil {
		return nil, err
	}
	if m.Set, err = core.Define(sessions, "set", func(ctx context.Context, s *Session, e Entry) (struct{}, error) {
		return struct{}{}, s.Set(ctx, e.Key, e.Value)
	}); err != nil {
		return nil, err
	}
	if m.Delete, err = core.Define(sessions, "delete", func(ctx context.Context, s *Session, key string) (struct{}, error) {
		return struct{}{}, s.Delete(ctx, key)
	}); err != nil {
		return nil, err
	}
	if m.End, err = core.Define(sessions, "end", func(ctx context.Context, s *Session, _ struct{}) (struct{}, error) {
		return struct{}{}, s.End(ctx)
	}); err != nil {
		return nil, err
	}
	return &m, nil
}
