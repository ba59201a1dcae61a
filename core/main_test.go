package core_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine outlives the runtimes the tests close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
