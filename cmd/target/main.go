// Command target is the capsule daemon and its tools.
//
// Until the NVMe-oF target lands, plain `target` runs `perf serve` on the
// default listeners, so `make run` starts something a client can reach.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	_ "github.com/capsule-storage/capsule/rdma/providers"
)

// defaultListeners are where the target listens when no --listen is given.
var defaultListeners = []string{"iwarp://127.0.0.1:4420", "shm://capsule"}

func newApp() *cli.App {
	return &cli.App{
		Name:  "target",
		Usage: "capsule storage target: NVMe-oF over RDMA (iwarp, shm, rdma) and its tools",
		Description: "Run without a command, target starts with its embedded defaults.\n" +
			"Today that is the RDMA perf responder on " + fmt.Sprint(defaultListeners) + ";\n" +
			"the NVMe-oF `serve` command takes its place when it lands.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Before: func(c *cli.Context) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return cli.Exit(fmt.Sprintf("bad --log-level: %v", err), 2)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: lvl})))
			return nil
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("target: unknown command %q (see target --help)", c.Args().First()), 2)
			}
			return perfServe(c.Context, c.App.Writer, defaultListeners)
		},
		Commands: []*cli.Command{perfCommand(), scrubCommand(), repairCommand()},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		os.Exit(1)
	}
}
