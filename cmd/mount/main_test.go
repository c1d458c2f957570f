package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// Until the file service exists, mount must refuse with exit status 2
// instead of pretending to mount.
func TestMountRefusesUntilBuilt(t *testing.T) {
	app := newApp()
	app.ExitErrHandler = func(*cli.Context, error) {}
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run([]string{"mount", "iwarp://127.0.0.1:4420", "/mnt"})
	require.Error(t, err)
	var ec cli.ExitCoder
	require.ErrorAs(t, err, &ec)
	assert.Equal(t, 2, ec.ExitCode())
	assert.Contains(t, err.Error(), "not implemented")
}
