package session_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/session"
)

// One object per session id: Set stores a value and starts (or extends)
// the session; End is a logout.
func Example() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	sessions, err := core.Register(rt, "sessions", session.New)
	if err != nil {
		log.Fatal(err)
	}
	stub, err := sessions.Get("sid-42")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	err = core.Do(ctx, stub, func(ctx context.Context, s *session.Session) error {
		return s.Set(ctx, "user", []byte("ada"))
	})
	if err != nil {
		log.Fatal(err)
	}
	get := func(ctx context.Context, s *session.Session) ([]byte, error) { return s.Get(ctx, "user") }
	user, err := core.Call(ctx, stub, get)
	fmt.Printf("user: %s, err: %v\n", user, err)

	err = core.Do(ctx, stub, func(ctx context.Context, s *session.Session) error { return s.End(ctx) })
	if err != nil {
		log.Fatal(err)
	}
	_, err = core.Call(ctx, stub, get)
	fmt.Println("after End, not found:", errors.Is(err, session.ErrNotFound))
	// Output:
	// user: ada, err: <nil>
	// after End, not found: true
}

// Touch moves the deadline to now + TTL; call it on each request.
func ExampleSession_Touch() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	sessions, err := core.Register(rt, "sessions", session.Options{TTL: time.Hour}.New)
	if err != nil {
		log.Fatal(err)
	}
	stub, err := sessions.Get("sid-42")
	if err != nil {
		log.Fatal(err)
	}
	deadline, err := core.Call(context.Background(), stub, func(ctx context.Context, s *session.Session) (time.Time, error) {
		return s.Touch(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("expires in", time.Until(deadline).Round(time.Minute))
	// Output:
	// expires in 1h0m0s
}

// A link created with an expiry arms its own alarm: no job scans a table
// of links. Resolve reports ErrExpired from the expiry on.
func ExampleLink() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	links, err := core.Register(rt, "links", session.NewLink)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for code, expires := range map[string]time.Time{
		"sale": now.Add(time.Hour),  // expires in an hour
		"old":  now.Add(-time.Hour), // expired an hour ago: its alarm fires at once
	} {
		stub, err := links.Get(code)
		if err != nil {
			log.Fatal(err)
		}
		err = core.Do(ctx, stub, func(ctx context.Context, l *session.Link) error {
			return l.Create(ctx, "https://example.com/"+code, expires)
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	for _, code := range []string{"sale", "old", "unknown"} {
		stub, err := links.Get(code)
		if err != nil {
			log.Fatal(err)
		}
		target, err := core.Call(ctx, stub, func(ctx context.Context, l *session.Link) (string, error) {
			return l.Resolve(ctx)
		})
		switch {
		case errors.Is(err, session.ErrExpired):
			fmt.Println(code, "-> expired")
		case errors.Is(err, session.ErrNotFound):
			fmt.Println(code, "-> not found")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(code, "->", target)
		}
	}
	// Output:
	// sale -> https://example.com/sale
	// old -> expired
	// unknown -> not found
}
