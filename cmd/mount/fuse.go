package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/urfave/cli/v2"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/fusefs"
	"github.com/capsule-storage/capsule/internal/cliexit"
)

// runFUSE mounts the target's file service at MOUNTPOINT with FUSE
// (package fs/fusefs over the file client, package fs) and serves it in
// the foreground until SIGINT or SIGTERM, or until someone unmounts it
// (`fusermount3 -u MOUNTPOINT`). It prints "capsule mounted at
// MOUNTPOINT" once a stat of the mountpoint has gone through the mount.
func runFUSE(c *cli.Context) error {
	mnt := c.Args().First()
	if fi, err := os.Stat(mnt); err != nil {
		return cli.Exit(fmt.Sprintf("mount: mountpoint: %v", err), 2)
	} else if !fi.IsDir() {
		return cli.Exit(fmt.Sprintf("mount: mountpoint %s is not a directory", mnt), 2)
	}
	if c.Duration("attr-timeout") < 0 || c.Duration("entry-timeout") < 0 {
		return cli.Exit("mount: --attr-timeout and --entry-timeout must not be negative", 2)
	}
	if c.Int("max-readahead") < 0 || c.Int("fuse-readers") < 0 {
		return cli.Exit("mount: --max-readahead and --fuse-readers must not be negative", 2)
	}
	logger := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	opts := []capfs.Option{
		capfs.WithSubsystem(c.String("nqn")),
		capfs.WithReconnectTimeout(c.Duration("reconnect-timeout")),
		capfs.WithLogger(logger),
	}
	if h := c.String("hostnqn"); h != "" {
		opts = append(opts, capfs.WithHostNQN(h))
	}
	dialCtx, cancel := context.WithTimeout(c.Context, c.Duration("reconnect-timeout")+10*time.Second)
	client, err := capfs.Dial(dialCtx, c.String("target"), opts...)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to %s: %s", c.String("target"), cliexit.Cause(err))
	}
	defer client.Close()

	o := fusefs.Options{
		AttrTimeout:        c.Duration("attr-timeout"),
		EntryTimeout:       c.Duration("entry-timeout"),
		MaxReadAhead:       c.Int("max-readahead"),
		Readers:            c.Int("fuse-readers"),
		Splice:             c.Bool("splice"),
		FsName:             "capsule:" + c.String("target"),
		AllowOther:         c.Bool("allow-other"),
		DefaultPermissions: c.Bool("default-permissions"),
		WriteBehind:        c.Bool("write-behind"),
		WritebackCache:     c.Bool("writeback-cache"),
		Debug:              c.Bool("fuse-debug"),
		Logger:             log.New(c.App.ErrWriter, "fuse: ", log.LstdFlags),
	}
	return serveFUSE(c.Context, client, mnt, o, c.App.Writer, logger)
}

// serveFUSE mounts client at mnt, says so on out, and serves until ctx
// ends (then it unmounts) or the mount goes away from outside.
func serveFUSE(ctx context.Context, client fusefs.Client, mnt string, o fusefs.Options, out io.Writer, logger *slog.Logger) error {
	server, err := fusefs.Mount(ctx, client, mnt, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "capsule mounted at %s\n", mnt)
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	select {
	case <-done:
		syncAtUnmount(client, logger) // unmounted from outside
		return nil
	case <-ctx.Done():
	}
	lazy, err := unmount(server, mnt, logger)
	if err != nil {
		return err
	}
	if !lazy {
		<-done
	}
	syncAtUnmount(client, logger)
	return nil
}

// unmountSyncTimeout bounds the sync at unmount.
const unmountSyncTimeout = 5 * time.Second

// syncAtUnmount makes what the mount changed durable on the target (an
// FSYNC of the root syncs the whole namespace: fs/server's durability
// rule names unmount as a sync point, as a local file system writes
// everything back when it is unmounted). It waits at most
// unmountSyncTimeout: a target that is gone has nothing to sync, and the
// mount must not outlive a stop signal by a reconnect timeout. A command
// the client has sent waits for its answer or for the connection to be
// given up (the reconnect timeout), whatever its context says, so the
// wait is here: the process exits after it either way.
func syncAtUnmount(client fusefs.Client, logger *slog.Logger) {
	syncWithin(client, logger, unmountSyncTimeout)
}

func syncWithin(client fusefs.Client, logger *slog.Logger, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- client.Fsync(ctx, fusefs.RootIno, 0, false) }()
	select {
	case err := <-done:
		if err != nil {
			logger.Warn("mount: syncing the file system at unmount failed", "err", err)
		}
	case <-ctx.Done():
		logger.Warn("mount: syncing the file system at unmount did not finish; exiting without it", "waited", limit)
	}
}

// unmount unmounts. When the mount is busy (a process has its working
// directory or a file open there), it detaches it lazily instead, as
// `fusermount3 -u -z` does, and reports lazy: the process then exits,
// and what still uses the detached mount gets ENOTCONN.
func unmount(server *fuse.Server, mnt string, logger *slog.Logger) (lazy bool, err error) {
	err = server.Unmount()
	if err == nil {
		return false, nil
	}
	logger.Warn("mount: unmount failed; detaching lazily", "mountpoint", mnt, "err", err)
	if out, lerr := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); lerr != nil {
		return false, fmt.Errorf("unmounting %s: %v; fusermount3 -u -z: %v: %s", mnt, err, lerr, out)
	}
	return true, nil
}
