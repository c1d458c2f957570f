// Command mount is capsule's host-side edge. It has two modes:
//
//	mount --target URL [--nqn NQN] MOUNTPOINT
//	    mounts the target's file service with FUSE (fuse.go);
//	mount --target URL --nbd HOST:PORT [--nsid N] [--export NAME]
//	    exports a block namespace of the target over NBD, so fio, qemu,
//	    nbdcopy and nbdinfo drive capsule's NVMe-oF path (nbd.go).
//
// Both run in the foreground until SIGINT or SIGTERM.
//
// CAPSULE_CPUPROFILE=FILE in the environment writes a CPU profile of the
// whole run to FILE, and CAPSULE_TRACE=FILE an execution trace
// (internal/profenv).
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/internal/profenv"
)

// defaultNQN is the subsystem bin/target serves when given no --nqn.
const defaultNQN = "nqn.2026-11.io.capsule:default"

func newApp() *cli.App {
	return &cli.App{
		Name:      "mount",
		Usage:     "mount capsule's file service (FUSE) or export a block namespace (NBD)",
		ArgsUsage: "MOUNTPOINT (FUSE mode; none with --nbd)",
		Description: "Mounts the target's file service at MOUNTPOINT with FUSE, or with --nbd HOST:PORT exports\n" +
			"namespace --nsid over NBD; both run in the foreground until SIGINT or SIGTERM.\n\n" +
			"Exit status: 0 unmounted or stopped by a signal; 1 it failed (the target could not be reached,\n" +
			"the mount or the NBD listener could not be set up); 2 bad flags or arguments (checked before\n" +
			"anything is dialed). An error is one line on stderr: \"mount: what failed: why\".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Usage: "target `URL` (required): iwarp://HOST:PORT, shm://NAME, tcp://HOST:PORT"},
			&cli.StringFlag{Name: "nqn", Value: defaultNQN, Usage: "subsystem `NQN` to connect to"},
			&cli.StringFlag{Name: "hostnqn", Usage: "host `NQN` to present (default: the machine's, from /etc/nvme/hostnqn or derived from /etc/machine-id)"},
			&cli.DurationFlag{Name: "reconnect-timeout", Value: 30 * time.Second, Usage: "how long operations wait for a lost target before failing with EIO"},

			// NBD mode.
			&cli.StringFlag{Name: "nbd", Usage: "export a namespace over NBD on `HOST:PORT` instead of mounting files"},
			&cli.UintFlag{Name: "nsid", Value: 1, Usage: "namespace `ID` to export (NBD mode)"},
			&cli.StringFlag{Name: "export", Usage: "NBD export `NAME` (NBD mode; default: the empty name)"},

			// FUSE mode.
			&cli.DurationFlag{Name: "attr-timeout", Value: time.Second, Usage: "kernel attribute cache timeout (FUSE mode)"},
			&cli.DurationFlag{Name: "entry-timeout", Value: time.Second, Usage: "kernel entry cache timeout (FUSE mode)"},
			&cli.IntFlag{Name: "max-readahead", Usage: "kernel read-ahead window in `BYTES` (FUSE mode; 0: the mount's default)"},
			&cli.IntFlag{Name: "fuse-readers", Usage: "goroutines waiting for FUSE requests (FUSE mode; 0: from GOMAXPROCS)"},
			&cli.BoolFlag{Name: "splice", Usage: "splice read replies to the kernel (FUSE mode; off: 1 MiB replies overflow the pipe)"},
			&cli.BoolFlag{Name: "allow-other", Usage: "let other users use the mount (FUSE mode; a mount made by root always does; a non-root user needs user_allow_other in /etc/fuse.conf)"},
			&cli.BoolFlag{Name: "default-permissions", Usage: "let the kernel check permission bits too, from its cached attributes (FUSE mode; the target checks every request either way)"},
			&cli.BoolFlag{Name: "writeback-cache", Value: true, Usage: "let the kernel keep written pages and send them in large writes, at the latest at close or fsync (FUSE mode; --writeback-cache=false sends every write(2) to the target as it comes)"},
			&cli.BoolFlag{Name: "write-behind", Usage: "with --writeback-cache=false: buffer small writes in the mount until close, fsync, a read or stat of the file, or 100ms, instead of answering each only once the target has it (FUSE mode)"},
			&cli.BoolFlag{Name: "fuse-debug", Usage: "log every FUSE request and reply to stderr (FUSE mode)"},
		},
		Action: func(c *cli.Context) error {
			if c.String("target") == "" {
				return cliexit.Usage("--target URL is required: the target to connect to, such as iwarp://127.0.0.1:4420 (see mount --help)")
			}
			if err := checkTargetURL(c.String("target")); err != nil {
				return cliexit.Usage("--target %s: %v", c.String("target"), err)
			}
			if h := c.String("hostnqn"); h != "" {
				if err := admin.CheckNQN(h); err != nil {
					return cliexit.Usage("--hostnqn %q: %v", h, err)
				}
			}
			if err := admin.CheckNQN(c.String("nqn")); err != nil {
				return cliexit.Usage("--nqn %q: %v", c.String("nqn"), err)
			}
			if c.IsSet("nbd") {
				if c.NArg() != 0 {
					return cli.Exit("mount: --nbd takes no MOUNTPOINT", 2)
				}
				return runNBD(c)
			}
			if c.NArg() != 1 {
				return cli.Exit("mount: want exactly one MOUNTPOINT (or --nbd HOST:PORT)", 2)
			}
			return runFUSE(c)
		},
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

// checkTargetURL checks --target's syntax before anything is dialed: a
// known scheme, and HOST:PORT with a numeric port for all but shm://NAME.
func checkTargetURL(u string) error {
	if err := admin.CheckListenURL(u); err != nil {
		return err
	}
	scheme, rest, _ := strings.Cut(u, "://")
	if i := strings.LastIndexByte(scheme, '+'); i >= 0 {
		scheme = scheme[i+1:]
	}
	if scheme == "shm" {
		return nil
	}
	_, port, err := net.SplitHostPort(rest)
	if err != nil {
		return fmt.Errorf("want %s://HOST:PORT", scheme)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
