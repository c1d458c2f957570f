package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIExitStatus runs the real binaries: misuse exits 2 and a failure
// 1, each with one line on stderr and nothing on stdout, and a bad flag of
// serve leaves --data as it was (not created).
func TestCLIExitStatus(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		bin  string
		args []string
		code int
		want string
	}{
		{"target", []string{"serve", "--data", data, "--bogus"}, 2, "target: serve: flag provided but not defined: -bogus"},
		{"target", []string{"serve", "--data", data, "--allow-host", "host1"}, 2, `target: --allow-host "host1": not an NQN`},
		{"target", []string{"serve", "--data", data, "--ec", "2+"}, 2, "target: --ec"},
		{"target", []string{"scrub", "--data", data}, 1, "target: open store: no store on these devices"},
		{"target", []string{"nosuch"}, 2, `target: unknown command "nosuch"`},
		{"mount", nil, 2, "mount: --target URL is required"},
		{"mount", []string{"--target", "iwarp://127.0.0.1:1", "--nbd", "127.0.0.1:0", "--reconnect-timeout", "1s"}, 1,
			"mount: connecting to iwarp://127.0.0.1:1: connection refused"},
	} {
		cmd := exec.Command(filepath.Join(binDir, tc.bin), tc.args...)
		cmd.Dir = dir
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%s %v: %v", tc.bin, tc.args, err)
		assert.Equal(t, tc.code, ee.ExitCode(), "%s %v: %s", tc.bin, tc.args, stderr.String())
		assert.Equal(t, tc.want, strings.TrimSpace(stderr.String())[:min(len(tc.want), len(strings.TrimSpace(stderr.String())))], "%s %v", tc.bin, tc.args)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr.String()), "\n")+1, "%s %v: one line: %s", tc.bin, tc.args, stderr.String())
		assert.Empty(t, stdout.String(), "%s %v", tc.bin, tc.args)
		_, serr := os.Stat(data)
		assert.ErrorIs(t, serr, os.ErrNotExist, "%s %v: nothing created", tc.bin, tc.args)
	}
}
