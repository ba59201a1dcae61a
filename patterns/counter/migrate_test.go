package counter_test

import (
	"context"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/patterns/counter"
	"github.com/stretchr/testify/require"
)

// A link's counts written by the constructor of before migrations (which
// ran step 1 itself) are read, and counted on, after the change.
func TestCounter_OpensLinksWrittenBeforeMigrations(t *testing.T) {
	dir := t.TempDir()
	coretest.Seed(t, dir, "counters", "link-1", `CREATE TABLE IF NOT EXISTS clicks(
  bucket INTEGER PRIMARY KEY, -- unix ms of the minute
  n INTEGER NOT NULL,
  flushed INTEGER NOT NULL DEFAULT 0
)`, "INSERT INTO clicks(bucket, n, flushed) VALUES (60000, 4, 1), (120000, 2, 0)")

	e := setup(t, dir, core.Options{}, nil)
	total := func() int64 {
		n, err := core.Call(context.Background(), e.stub(t, "link-1"), func(ctx context.Context, c *counter.Counter) (int64, error) {
			return c.Total(ctx)
		})
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, 6, total())
	e.record(t, "link-1")
	require.EqualValues(t, 7, total())
}
