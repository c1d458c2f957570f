// Command mount mounts capsule's file service with FUSE, or exports a block
// namespace over NBD. Neither service exists yet: the command says so and
// exits with status 2, so scripts fail loudly rather than mount nothing.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func newApp() *cli.App {
	return &cli.App{
		Name:      "mount",
		Usage:     "mount capsule's file service (FUSE) or export a block namespace (NBD)",
		ArgsUsage: "TARGET-URL MOUNTPOINT",
		Description: "Not available yet: the file service (fs/) and the NBD bridge are still to be built.\n" +
			"See the feature status table in README.md.",
		Action: func(c *cli.Context) error {
			return cli.Exit("mount: the file service and NBD bridge are not implemented yet (see README.md)", 2)
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mount:", err)
		os.Exit(1)
	}
}
