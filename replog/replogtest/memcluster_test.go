package replogtest_test

import (
	"testing"

	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL10: the in-memory engine the cluster-mode tests run on keeps replog.Log's contract.
func TestLogContract_MemCluster(t *testing.T) {
	replogtest.LogContract(t, func(*testing.T) replog.Log { return replogtest.NewMemCluster().Node().Log() })
}

// S-CL10: and replog.Leases' contract.
func TestLeasesContract_MemCluster(t *testing.T) {
	replogtest.LeasesContract(t, func(*testing.T) replog.Leases { return replogtest.NewMemCluster().Node().Leases() })
}

// S-CL10: and replog.Beacon's.
func TestBeaconContract_MemCluster(t *testing.T) {
	replogtest.BeaconContract(t, func(_ *testing.T, n int) []replog.Beacon {
		c := replogtest.NewMemCluster()
		var bs []replog.Beacon
		for range n {
			bs = append(bs, c.Node().Beacon())
		}
		return bs
	})
}

// S-CL13: and replog.Calls'.
func TestCallsContract_MemCluster(t *testing.T) {
	replogtest.CallsContract(t, func(_ *testing.T, n int) []replog.Calls {
		c := replogtest.NewMemCluster().WithMaxCallBytes(64 << 10)
		var cs []replog.Calls
		for range n {
			cs = append(cs, c.Node().Calls())
		}
		return cs
	})
}
