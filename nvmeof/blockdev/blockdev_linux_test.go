package blockdev

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// allocatedBytes returns the bytes a file occupies on disk.
func allocatedBytes(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}
