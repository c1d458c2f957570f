// Command target is the capsule daemon and its tools.
//
// Plain `target` runs `serve` with its embedded defaults: NVMe-oF on
// iwarp://127.0.0.1:4420 and shm://capsule, one 1 GiB erasure-coded
// namespace (volume vol0 of a 4+2 store on ./data/dev0 … ./data/dev5,
// created on first start).
//
// CAPSULE_CPUPROFILE=FILE in the environment writes a CPU profile of the
// whole run to FILE, and CAPSULE_TRACE=FILE an execution trace
// (internal/profenv).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/internal/profenv"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

// defaultListeners are where the target listens when no --listen is given.
var defaultListeners = []string{"iwarp://127.0.0.1:4420", "shm://capsule"}

func newApp() *cli.App {
	return &cli.App{
		Name:  "target",
		Usage: "capsule storage target: NVMe-oF over RDMA (iwarp, shm, rdma) and its tools",
		Description: "Run without a command, target serves NVMe-oF with its embedded defaults:\n" +
			"`target serve` on " + fmt.Sprint(defaultListeners) + " with one " + defaultNamespace + " namespace.\n\n" +
			"Every command exits 0 when it did what it was asked, 1 when it failed, and 2 for misuse (a bad\n" +
			"flag, argument or command: nothing was opened or written); scrub and repair also exit 3 when data\n" +
			"is lost. An error is one line on stderr: \"target: what failed: why\".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Before: func(c *cli.Context) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return cliexit.Usage("bad --log-level: %v", err)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: lvl})))
			return nil
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cliexit.Usage("unknown command %q (see target --help)", c.Args().First())
			}
			return serve(c.Context, c.App.Writer, defaultServeConfig())
		},
		Commands: []*cli.Command{serveCommand(serve), rpcCommand(), clusterCommand(), perfCommand(), scrubCommand(), repairCommand(), migrateCommand()},
	}
}

// main exits 1 for a failure and 2 for misuse (internal/cliexit), with
// the error in one line on stderr.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfiles := profenv.Start()
	code := cliexit.Run(ctx, newApp(), os.Args)
	stop()
	stopProfiles()
	os.Exit(code)
}
