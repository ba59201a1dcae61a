//go:build exercises && solution

package limiter_test

import "github.com/durable-go/durable/patterns/limiter"

// The tests' target with -tags solution: the reference solution.

type (
	Limiter  = limiter.Limiter
	Decision = limiter.Decision
)

var (
	newLimiter      = limiter.New
	errInvalidLimit = limiter.ErrInvalidLimit
)
