package main

import (
	"os"
	"testing"
)

// asMainEnv, set to 1, makes the test binary run as the program itself:
// the cluster command's test starts its node processes from it.
const asMainEnv = "COOKBOOK_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main() // exits on error
		os.Exit(0)
	}
	os.Exit(m.Run())
}
