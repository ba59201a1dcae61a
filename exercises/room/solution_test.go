//go:build exercises && solution

package room_test

import (
	"net/http"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
)

// The tests' target with -tags solution: the reference solution.

func rooms(rt *core.Runtime) (http.Handler, error) {
	ns, err := room.Register(rt, "rooms", room.Options{})
	if err != nil {
		return nil, err
	}
	return room.Handler(ns), nil
}
