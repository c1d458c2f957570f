// Package cliexit is how capsule's commands (bin/target, bin/mount, on
// urfave/cli/v2) end: an error is one line on stderr, "NAME: what failed:
// why", and the exit status says which kind it was: 1 for a failure, 2 for
// misuse (a bad flag, argument or usage; nothing was opened or written).
//
// Run replaces urfave/cli's own handling, which prints a usage error with
// the whole help text on stdout, exits from inside Run for cli.Exit
// errors, and exits 1 for a flag it does not know. A command says "misuse"
// by returning Usage (or any cli.ExitCoder with status 2); other statuses
// of a cli.ExitCoder are kept (scrub's 3 for lost data); every other error
// is a failure.
package cliexit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Exit statuses.
const (
	Failure = 1 // the command could not do what it was asked
	Misuse  = 2 // bad flags, arguments or usage
)

// Usage is a misuse error: exit status 2.
func Usage(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), Misuse)
}

// Run runs app with args and returns the exit status. An error is written
// to app.ErrWriter as one line (Line).
func Run(ctx context.Context, app *cli.App, args []string) int {
	Prepare(app)
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	fmt.Fprintln(app.ErrWriter, Line(app.Name, err))
	return Code(err)
}

// Prepare makes app leave exiting to its caller and turns flag errors of
// the app and every command into Usage errors that name the command.
func Prepare(app *cli.App) {
	app.ExitErrHandler = func(*cli.Context, error) {}
	app.OnUsageError = usageError(app.Name, "")
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			c.OnUsageError = usageError(app.Name, p)
			walk(p, c.Subcommands)
		}
	}
	walk("", app.Commands)
}

// usageError names the command (Line adds the app's name) and where its
// help is.
func usageError(app, path string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		if path == "" {
			return Usage("%v (see %s --help)", err, app)
		}
		return Usage("%s: %v (see %s %s --help)", path, err, app, path)
	}
}

// Cause is the innermost reason in err's chain worth printing on its
// own: the deepest system error (syscall.Errno: "connection refused",
// "address already in use"), or else err's message. Commands print
// "what failed: Cause(err)" instead of every layer's wrapping.
//
// A chain that carries the system error only as text ("rdma: connection
// refused: dial tcp ...: connect: connection refused") gives the system
// error it ends with.
func Cause(err error) string {
	msg := err.Error()
	ends := func(s string) bool { return msg == s || strings.HasSuffix(msg, ": "+s) }
	if errno, ok := deepestErrno(err); ok && ends(errno.Error()) {
		return errno.Error()
	}
	for _, e := range commonErrnos {
		if ends(e.Error()) {
			return e.Error()
		}
	}
	if ends(context.DeadlineExceeded.Error()) {
		return "timed out"
	}
	return msg
}

// commonErrnos are the system errors a network or file operation ends
// with that say all there is to say.
var commonErrnos = []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ETIMEDOUT, syscall.EHOSTUNREACH,
	syscall.ENETUNREACH, syscall.EADDRINUSE, syscall.EADDRNOTAVAIL, syscall.EACCES, syscall.EPERM, syscall.ENOENT,
	syscall.ENOSPC, syscall.EROFS, syscall.ENOTDIR}

// deepestErrno finds the syscall.Errno deepest in err's tree (a later
// branch wins a tie): "capfs: input/output error: ...: connection
// refused" is refused, not EIO.
func deepestErrno(err error) (syscall.Errno, bool) {
	var found syscall.Errno
	best := -1
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil {
			return
		}
		if en, ok := e.(syscall.Errno); ok && depth >= best {
			found, best = en, depth
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x, depth+1)
			}
		}
	}
	walk(err, 0)
	return found, best >= 0
}

// Code is the exit status for err: a cli.ExitCoder's own (1 if it says
// 0), 2 for a missing required flag, 1 otherwise.
func Code(err error) int {
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if c := ec.ExitCode(); c != 0 {
			return c
		}
		return Failure
	}
	if strings.HasPrefix(err.Error(), "Required flag") {
		return Misuse
	}
	return Failure
}

// Line is err as the one line a command prints: "name: message", the
// message's lines joined with "; " and a leading "name: " of its own
// dropped, so that no prefix comes twice.
func Line(name string, err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	msg := strings.Join(parts, "; ")
	for strings.HasPrefix(msg, name+": ") {
		msg = strings.TrimPrefix(msg, name+": ")
	}
	if msg == "" {
		msg = "failed"
	}
	return name + ": " + msg
}
