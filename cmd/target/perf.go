package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/internal/perftest"
)

func perfCommand() *cli.Command {
	return &cli.Command{
		Name:  "perf",
		Usage: "measure the RDMA layer between two processes, like perftest's ib_write_bw",
		Description: "Start `target perf serve --listen URL` in one process and\n" +
			"`target perf run --connect URL --op write --size 1MiB --qd 4 --duration 5s` in another.\n" +
			"URLs: iwarp://HOST:PORT, shm://NAME, rdma://HOST:PORT.",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cliexit.Usage("perf: unknown command %q: want serve or run (see target perf --help)", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{
			{
				Name:  "serve",
				Usage: "answer perf clients (one-sided writes and reads need nothing more)",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "listen", Usage: "URL to listen on (repeatable)", Value: cli.NewStringSlice(defaultListeners...)},
				},
				Action: func(c *cli.Context) error {
					return perfServe(c.Context, c.App.Writer, c.StringSlice("listen"))
				},
			},
			{
				Name:  "run",
				Usage: "drive a perf server and print bandwidth, messages per second and latency percentiles",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "connect", Usage: "server URL (required)"},
					&cli.StringFlag{Name: "op", Value: "write", Usage: "write, read or send"},
					&cli.StringFlag{Name: "size", Value: "64KiB", Usage: "message size, e.g. 4096, 64KiB, 1MiB"},
					&cli.IntFlag{Name: "qd", Value: 4, Usage: "operations in flight"},
					&cli.DurationFlag{Name: "duration", Value: 5 * time.Second, Usage: "how long to measure"},
					&cli.DurationFlag{Name: "warmup", Value: 500 * time.Millisecond, Usage: "unmeasured run before"},
				},
				Action: perfRun,
			},
		},
	}
}

func perfServe(ctx context.Context, out io.Writer, urls []string) error {
	var servers []*perftest.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	var addrs []string
	for _, u := range urls {
		s, err := perftest.Listen(ctx, u, slog.Default())
		if err != nil {
			return fmt.Errorf("perf serve: --listen %s: cannot listen: %s", u, cliexit.Cause(err))
		}
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	fmt.Fprintf(out, "capsule perf ready listeners=%s\n", strings.Join(addrs, ","))
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range servers {
		g.Go(func() error { return s.Serve(gctx) })
	}
	return g.Wait()
}

func perfRun(c *cli.Context) error {
	if c.String("connect") == "" {
		return cliexit.Usage("perf run: --connect URL is required: the URL `target perf serve` listens on")
	}
	if c.NArg() > 0 {
		return cliexit.Usage("perf run takes no arguments, got %q", c.Args().Slice())
	}
	op, err := perftest.ParseOp(c.String("op"))
	if err != nil {
		return cliexit.Usage("perf run: --op: %v", err)
	}
	size, err := parseSize(c.String("size"))
	if err != nil {
		return cliexit.Usage("perf run: --size: %v", err)
	}
	res, err := perftest.Run(c.Context, c.String("connect"), perftest.Params{
		Op: op, Size: int(size), QD: c.Int("qd"), Duration: c.Duration("duration"), Warmup: c.Duration("warmup"),
	})
	if err != nil {
		return fmt.Errorf("perf run: --connect %s: %s", c.String("connect"), cliexit.Cause(err))
	}
	fmt.Fprintln(c.App.Writer, res)
	return nil
}
