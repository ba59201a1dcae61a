//go:build unix

package core_test

import (
	"log/slog"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// The default MaxOpenObjects is sized by the machine: Open raises a soft
// descriptor limit below the hard one, keeps 2 descriptors per open object
// within it (an eighth of it left to the rest of the process), says what it
// chose in Stats and in one log record; an explicit option is kept as given.
func TestOpen_DefaultCacheSizedByMachine(t *testing.T) {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Max > 2048 { // lower the soft limit for the test, as a shell's ulimit -Sn would
		low := lim
		low.Cur = 1024
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
		t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	}
	logs := newLogCapture()
	rt := openRuntime(t, core.Options{Logger: slog.New(logs)})
	var now syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now))
	require.Equal(t, lim.Max, now.Cur, "the soft limit is raised to the hard one")
	got := rt.Stats().MaxOpenObjects
	require.GreaterOrEqual(t, got, int64(64))
	require.LessOrEqual(t, got, int64(now.Cur-now.Cur/8)/2, "2 descriptors per object within the limit, an eighth kept")
	if lim.Max > 2048 {
		require.Greater(t, got, int64(1024/2), "sized from the raised limit, not the lowered one")
	}
	rec, ok := logs.find("event=max_open_objects")
	require.True(t, ok, "Open says what it chose: %v", logs.all())
	require.Contains(t, rec, "max=")

	other := openRuntime(t, core.Options{MaxOpenObjects: 10, Logger: slog.New(slog.DiscardHandler)})
	require.Equal(t, int64(10), other.Stats().MaxOpenObjects, "an explicit bound is kept")
}
