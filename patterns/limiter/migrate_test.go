package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/stretchr/testify/require"
)

// A key written by the constructor of before migrations (which ran step 1
// itself) keeps its window, and gets step 2's index.
func TestLimiter_OpensKeysWrittenBeforeMigrations(t *testing.T) {
	dir := t.TempDir()
	coretest.Seed(t, dir, "ratelimit", "ip-1", "CREATE TABLE IF NOT EXISTS w(ts INTEGER)",
		fmt.Sprintf("INSERT INTO w VALUES (%d), (%d)", t0.Add(-20*time.Second).UnixNano(), t0.Add(-10*time.Second).UnixNano()))

	rt := coretest.Open(t, core.Options{Dir: dir})
	keys := mustRegister(t, rt)
	key := mustKey(t, keys, "ip-1")
	d, err := allowAt(key, t0, 3, time.Minute)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 0, d.Remaining, "the two calls made before count")
	d, err = allowAt(key, t0, 3, time.Minute)
	require.NoError(t, err)
	require.False(t, d.Allowed)

	// The index came with step 2: the same namespace name, read with a
	// plain constructor on the same directory.
	require.NoError(t, rt.Close())
	rt = coretest.Open(t, core.Options{Dir: dir})
	raw, err := core.Register(rt, "ratelimit", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
	require.NoError(t, err)
	stub, err := raw.Get("ip-1")
	require.NoError(t, err)
	n, err := core.Call(context.Background(), stub, func(ctx context.Context, st *core.State) (int, error) {
		var n int
		return n, st.Storage().One(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'w_ts'").Scan(&n)
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
