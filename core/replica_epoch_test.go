package core_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/replog"
	"github.com/durable-go/durable/replog/replogtest"
)

// S-CL3: the epochs read back from an object's log, record by record, through the engine: node 1's
// epoch record and commits carry one epoch, and node 2, taking the object over after node 1 handed
// it back, writes a higher one, never a lower. A damaged or foreign record is an error.
func TestRecordEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := replogtest.NewMemCluster()
		n1 := openNode(t, c, "n1")
		n2 := openNode(t, c, "n2")
		defer n2.rt.Close()
		require.NoError(t, n1.put("acct", "a", "1"))
		require.NoError(t, n1.put("acct", "b", "2"))
		require.NoError(t, n1.rt.Close())
		require.NoError(t, n2.put("acct", "c", "3"))

		var epochs []uint64
		require.NoError(t, n2.view.Log().Read(context.Background(), "kv/acct", 0, func(_ uint64, rec []byte) error {
			e, err := replog.RecordEpoch(rec)
			epochs = append(epochs, e)
			return err
		}))
		// n1: epoch record, two commits; n2: epoch record, one commit.
		require.Len(t, epochs, 5)
		require.NotZero(t, epochs[0])
		require.Equal(t, []uint64{epochs[0], epochs[0], epochs[0]}, epochs[:3], "one epoch per owner")
		require.Greater(t, epochs[3], epochs[2], "the new owner's epoch is higher")
		require.Equal(t, epochs[3], epochs[4])

		recs := c.Records("kv/acct")
		bad := append([]byte(nil), recs[1]...)
		bad[len(bad)-1] ^= 1
		_, err := replog.RecordEpoch(bad)
		require.Error(t, err, "a damaged record")
		_, err = replog.RecordEpoch([]byte("not a record"))
		require.Error(t, err, "a record the runtime did not write")
		_, err = replog.RecordEpoch(nil)
		require.Error(t, err)
	})
}

// S-X1: every key the runtime makes (a namespace of at most 64 bytes, '/', a name of at most
// MaxNameLen bytes) fits the engine contract's bound.
func TestReplogMaxKeyLen(t *testing.T) {
	require.Equal(t, 64+1+core.MaxNameLen, replog.MaxKeyLen)
}
