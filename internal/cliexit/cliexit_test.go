package cliexit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/urfave/cli/v2"
)

func TestLine(t *testing.T) {
	assert.Equal(t, "target: listen: busy", Line("target", errors.New("target: target: listen: busy")))
	assert.Equal(t, "target: open store: no store; is --data right?", Line("target", errors.New("open store: no store\nis --data right?\n")))
	assert.Equal(t, "mount: failed", Line("mount", errors.New("")))
}

func TestCode(t *testing.T) {
	assert.Equal(t, 0, Code(nil))
	assert.Equal(t, Failure, Code(errors.New("x")))
	assert.Equal(t, Misuse, Code(Usage("bad --x")))
	assert.Equal(t, Misuse, Code(fmt.Errorf("wrapped: %w", Usage("bad --x"))))
	assert.Equal(t, 3, Code(cli.Exit("lost", 3)))
	assert.Equal(t, Failure, Code(cli.Exit("zero", 0)))
	assert.Equal(t, Misuse, Code(errors.New(`Required flag "target" not set`)))
}

func TestCause(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	err := fmt.Errorf("capfs: %w: %w", syscall.EIO, fmt.Errorf("nvmeof/host: queue 0: %w", refused))
	assert.Equal(t, "connection refused", Cause(err), "the deepest errno, not the EIO wrapped around it")
	assert.Equal(t, "connection refused", Cause(errors.New("rdma: connection refused: dial tcp 127.0.0.1:1: connect: connection refused")))
	assert.Equal(t, "timed out", Cause(fmt.Errorf("dial: %w", context.DeadlineExceeded)))
	assert.Equal(t, `unknown scheme "x"`, Cause(errors.New(`unknown scheme "x"`)))
}

// Run turns flag errors of commands and subcommands into one line and
// status 2, and prints nothing on stdout.
func TestRun(t *testing.T) {
	app := &cli.App{Name: "tool", Commands: []*cli.Command{{Name: "sub", Subcommands: []*cli.Command{{Name: "leaf", Action: func(*cli.Context) error { return errors.New("leaf failed") }}}}}}
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	assert.Equal(t, Misuse, Run(context.Background(), app, []string{"tool", "sub", "leaf", "--nope"}))
	assert.Equal(t, "tool: sub leaf: flag provided but not defined: -nope (see tool sub leaf --help)\n", errOut.String())
	assert.Empty(t, out.String())
	errOut.Reset()
	assert.Equal(t, Failure, Run(context.Background(), app, []string{"tool", "sub", "leaf"}))
	assert.Equal(t, "tool: leaf failed\n", errOut.String())
}
