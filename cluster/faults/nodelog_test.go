package faults

import (
	"log/slog"
	"strings"
	"testing"
)

// The nodes' log level (-faults.nodelog) is one of slog's names, warn when none is given; any
// other name is refused with an error that says which are accepted, before any node starts.
func TestNodeLogLevel(t *testing.T) {
	for name, want := range map[string]slog.Level{"": slog.LevelWarn, "debug": slog.LevelDebug, "info": slog.LevelInfo, "WARN": slog.LevelWarn, "error": slog.LevelError} {
		got, err := nodeLogLevel(name)
		if err != nil || got != want {
			t.Errorf("nodeLogLevel(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	_, err := nodeLogLevel("verbose")
	if err == nil || !strings.Contains(err.Error(), `"verbose"`) || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Errorf("nodeLogLevel(%q): error %v; want one naming the level and the accepted ones", "verbose", err)
	}
}
