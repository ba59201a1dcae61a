//go:build exercises && !solution

package limiter_test

import ex "github.com/durable-go/durable/exercises/limiter"

// The tests' target: your answer. With -tags solution they run against
// patterns/limiter instead (solution_test.go).

type (
	Limiter  = ex.Limiter
	Decision = ex.Decision
)

var (
	newLimiter      = ex.New
	errInvalidLimit = ex.ErrInvalidLimit
)
