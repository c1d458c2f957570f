package target

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoTestHooksLinked: the target links no fault-injection code; tests
// wrap its listeners through WithListenerWrapper instead.
func TestNoTestHooksLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/capsule-storage/capsule/internal/netfault", dep)
	}
}
