package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
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
