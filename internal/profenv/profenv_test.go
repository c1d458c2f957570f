package profenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStart: both files are written, and a path that cannot be created
// is skipped.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "run.trace")
	t.Setenv("CAPSULE_CPUPROFILE", cpu)
	t.Setenv("CAPSULE_TRACE", tr)
	stop := Start()
	x := 0
	for i := range 1 << 20 {
		x += i
	}
	stop()
	for _, p := range []string{cpu, tr} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.NotZero(t, st.Size(), p)
	}

	t.Setenv("CAPSULE_CPUPROFILE", filepath.Join(dir, "missing", "cpu.prof"))
	t.Setenv("CAPSULE_TRACE", "")
	Start()()
	_, err := os.Stat(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
