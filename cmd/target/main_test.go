package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// A mistyped command must fail, not start the daemon's default action.
func TestUnknownCommandFails(t *testing.T) {
	app := newApp()
	app.ExitErrHandler = func(*cli.Context, error) {}
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run([]string{"target", "srub"})
	require.Error(t, err)
	var ec cli.ExitCoder
	require.ErrorAs(t, err, &ec)
	assert.Equal(t, 2, ec.ExitCode())
	assert.Contains(t, err.Error(), `unknown command "srub"`)
}

func TestCommandsListed(t *testing.T) {
	app := newApp()
	for _, name := range []string{"perf", "scrub", "repair"} {
		assert.NotNil(t, app.Command(name), name)
	}
}
