package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/nbd"
	"github.com/capsule-storage/capsule/nvmeof/nbd/nsdevice"
	_ "github.com/capsule-storage/capsule/rdma/providers" // iwarp://, shm://, rdma://
)

// nbdDrainTimeout bounds how long SIGINT/SIGTERM waits for the requests
// in flight to be answered.
const nbdDrainTimeout = 30 * time.Second

// runNBD exports a block namespace over NBD: it connects to the target,
// listens on --nbd, prints one ready line and serves until SIGINT or
// SIGTERM, then answers the requests in flight and disconnects.
func runNBD(c *cli.Context) error {
	ctx := c.Context
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Queues, depth and buffers as nsdevice explains them.
	opts := append(nsdevice.DialOptions(),
		host.WithSubsystem(c.String("nqn")),
		host.WithCtrlLossTimeout(c.Duration("reconnect-timeout")),
		host.WithLogger(log),
	)
	if n := c.String("hostnqn"); n != "" {
		opts = append(opts, host.WithHostNQN(n))
	}
	nsid := c.Uint("nsid")
	if nsid == 0 || nsid > 0xfffffffe {
		return cli.Exit(fmt.Sprintf("mount: --nsid %d is not a namespace ID", nsid), 2)
	}
	if _, _, err := net.SplitHostPort(c.String("nbd")); err != nil {
		return cliexit.Usage("mount: --nbd %s: want HOST:PORT, such as 127.0.0.1:10809", c.String("nbd"))
	}
	// Listen first: an address in use fails before the target is dialed.
	l, err := net.Listen("tcp", c.String("nbd"))
	if err != nil {
		return fmt.Errorf("--nbd %s: cannot listen: %s", c.String("nbd"), cliexit.Cause(err))
	}
	defer l.Close() // Serve closes it too; this is for the early returns
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ctrl, err := host.Dial(dctx, c.String("target"), opts...)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to %s: %s", c.String("target"), cliexit.Cause(err))
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(uint32(nsid))
	if err != nil {
		return fmt.Errorf("namespace %d: %w", nsid, err)
	}
	desc := fmt.Sprintf("capsule %s namespace %d at %s", ctrl.SubsystemNQN(), nsid, c.String("target"))
	exp, err := nsdevice.Export(ns, c.String("export"), desc, nbd.DefaultSlots)
	if err != nil {
		return err
	}
	srv := &nbd.Server{Exports: []nbd.Export{exp}, Slots: nbd.DefaultSlots, Logger: log}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(c.App.Writer, "capsule nbd ready listen=%s export=%q size=%d block=%d target=%s\n",
		l.Addr(), exp.Name, exp.Size, exp.MinBlock, c.String("target"))

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serving NBD: %w", err)
	}
	log.Info("signal received: answering the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), nbdDrainTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("draining NBD connections: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, nbd.ErrServerClosed) {
		return err
	}
	return nil
}
