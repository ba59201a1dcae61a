//go:build exercises && !solution

package room_test

import (
	"net/http"

	"github.com/durable-go/durable/core"
	ex "github.com/durable-go/durable/exercises/room"
)

// The tests' target: your answer. With -tags solution they run against
// patterns/room instead (solution_test.go).

func rooms(rt *core.Runtime) (http.Handler, error) {
	ns, err := ex.Register(rt, "rooms", ex.Options{})
	if err != nil {
		return nil, err
	}
	return ex.Handler(ns), nil
}
