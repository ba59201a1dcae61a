package coretest_test

import (
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
)

// S-CL10: the in-memory engine the cluster-mode tests run on keeps core.Log's contract.
func TestLogContract_MemCluster(t *testing.T) {
	coretest.LogContract(t, func(*testing.T) core.Log { return coretest.NewMemCluster().Node().Log() })
}

// S-CL10: and core.Leases' contract.
func TestLeasesContract_MemCluster(t *testing.T) {
	coretest.LeasesContract(t, func(*testing.T) core.Leases { return coretest.NewMemCluster().Node().Leases() })
}
