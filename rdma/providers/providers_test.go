package providers

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoFaultProviderLinked: importing the providers links no
// fault-injection code; tests import rdma/fault themselves.
func TestNoFaultProviderLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/capsule-storage/capsule/rdma/fault", dep)
	}
}
