package main

import (
	"strings"
	"testing"
)

// Cluster flags without -node are refused with a message that says why.
func TestServe_ClusterFlagsNeedNode(t *testing.T) {
	var out syncBuffer
	err := serve(t.Context(), []string{"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-routes", "nats://127.0.0.1:1"}, &out, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "-node") {
		t.Fatalf("serve -routes without -node: %v", err)
	}
}
