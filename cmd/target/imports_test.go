package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoTestHooksLinked: the binary links no fault-injection code, so it
// takes no fault+ URL; tests import rdma/fault and internal/netfault
// themselves.
func TestNoTestHooksLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, []string{
			"github.com/capsule-storage/capsule/rdma/fault",
			"github.com/capsule-storage/capsule/internal/netfault",
		}, dep)
	}
}
