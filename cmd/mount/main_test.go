package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/cliexit"
)

func runApp(t *testing.T, args ...string) error {
	t.Helper()
	app := newApp()
	app.ExitErrHandler = func(*cli.Context, error) {}
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	return app.Run(append([]string{"mount"}, args...))
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	require.Error(t, err)
	var ec cli.ExitCoder
	require.ErrorAs(t, err, &ec)
	return ec.ExitCode()
}

func TestMountArguments(t *testing.T) {
	assert.Error(t, runApp(t, "/mnt"), "--target is required")
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", "iwarp://127.0.0.1:4420")), "FUSE mode without a mountpoint")
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", "iwarp://127.0.0.1:4420", "--nbd", "127.0.0.1:10809", "/mnt")), "NBD mode with a mountpoint")
}

// TestExitStatus runs mount's main path: 2 for misuse, 1 for a failure,
// the error in one line that names mount once.
func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "mount: --target URL is required"},
		{[]string{"--bogus"}, 2, "mount: flag provided but not defined: -bogus (see mount --help)"},
		{[]string{"--target", "iwarp://127.0.0.1:1"}, 2, "want exactly one MOUNTPOINT"},
		{[]string{"--target", "nvme://x", dir}, 2, "mount: --target nvme://x"},
		{[]string{"--target", "iwarp://127.0.0.1", dir}, 2, "--target iwarp://127.0.0.1"},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--hostnqn", "me", dir}, 2, `--hostnqn "me": not an NQN`},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--nqn", "x", dir}, 2, `--nqn "x": not an NQN`},
		{[]string{"--target", "iwarp://127.0.0.1:1", dir + "/missing"}, 2, "mountpoint"},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--attr-timeout", "-1s", dir}, 2, "must not be negative"},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--nbd", "127.0.0.1"}, 2, "--nbd 127.0.0.1: want HOST:PORT"},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--nbd", "127.0.0.1:0", "--nsid", "0"}, 2, "--nsid 0"},
		{[]string{"--target", "iwarp://127.0.0.1:1", "--nbd", "127.0.0.1:0", "--reconnect-timeout", "1s"}, 1,
			"mount: connecting to iwarp://127.0.0.1:1: connection refused"},
	} {
		app := newApp()
		var out, errOut bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errOut
		code := cliexit.Run(context.Background(), app, append([]string{"mount"}, tc.args...))
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut.String())
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		last := lines[len(lines)-1]
		assert.Contains(t, last, tc.want, "%v", tc.args)
		assert.Equal(t, 1, strings.Count(last, "mount: "), "%v: %s", tc.args, last)
		assert.Empty(t, out.String(), "%v: nothing on stdout", tc.args)
	}
}
