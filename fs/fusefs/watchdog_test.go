package fusefs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// The mounts of this package's tests are served by the test binary
// itself. When one deadlocks (a test waits on a request its own mount
// never answers), go test -timeout cannot end the binary: exiting closes
// its files on the mount, each close waits for a FLUSH that the exiting
// process will never serve, and the binary sits in uninterruptible sleep
// until CI's own limit. So a watchdog aborts every mount the binary still
// has (fusectl's abort file) watchdogMargin before the binary's
// deadline: the calls waiting on them fail with ECONNABORTED (and later
// ones with ENOTCONN), the test that hung fails, and the binary can exit.

// watchdogMargin is how long before the test binary's deadline the
// watchdog aborts the mounts left.
const watchdogMargin = 30 * time.Second

// fusectlDir is where fusectl shows the FUSE connections.
const fusectlDir = "/sys/fs/fuse/connections"

var watchdog struct {
	once   sync.Once
	mu     sync.Mutex
	mounts map[uint64]string // the device number of each mount, to its mountpoint
}

// watchMount puts the mount at dir under the watchdog until the test
// ends, starting the watchdog with the first mount.
func watchMount(t testing.TB, dir string) {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	watchdog.mu.Lock()
	if watchdog.mounts == nil {
		watchdog.mounts = map[uint64]string{}
	}
	watchdog.mounts[st.Dev] = dir
	watchdog.mu.Unlock()
	t.Cleanup(func() {
		watchdog.mu.Lock()
		delete(watchdog.mounts, st.Dev)
		watchdog.mu.Unlock()
	})
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return
	}
	deadline, ok := d.Deadline()
	if !ok {
		return
	}
	watchdog.once.Do(func() {
		time.AfterFunc(time.Until(deadline.Add(-watchdogMargin)), func() {
			for _, err := range abortMounts() {
				fmt.Fprintln(os.Stderr, "fusefs test watchdog:", err)
			}
		})
	})
}

// abortMounts aborts the FUSE connection of every watched mount and
// reports what it did.
func abortMounts() []error {
	watchdog.mu.Lock()
	defer watchdog.mu.Unlock()
	var out []error
	if len(watchdog.mounts) > 0 {
		if err := mountFusectl(); err != nil {
			return []error{err}
		}
	}
	for dev, dir := range watchdog.mounts {
		if err := abortConnection(dev); err != nil {
			out = append(out, fmt.Errorf("aborting the mount at %s: %w", dir, err))
			continue
		}
		out = append(out, fmt.Errorf("aborted the mount at %s, %v before the test binary's deadline", dir, watchdogMargin))
	}
	return out
}

// mountFusectl mounts fusectl on fusectlDir unless it is there.
func mountFusectl() error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(fusectlDir, &sfs); err != nil {
		return fmt.Errorf("%s: %w", fusectlDir, err)
	}
	const fusectlMagic = 0x65735543
	if sfs.Type == fusectlMagic {
		return nil
	}
	if err := unix.Mount("none", fusectlDir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mounting fusectl on %s: %w", fusectlDir, err)
	}
	return nil
}

// abortConnection aborts the FUSE connection of the mount with device
// number dev: fusectl names a connection by the kernel's number of the
// mount's device, an anonymous one (major 0), so its minor.
func abortConnection(dev uint64) error {
	return os.WriteFile(fmt.Sprintf("%s/%d/abort", fusectlDir, unix.Minor(dev)), []byte("1"), 0)
}

// TestWatchdogAborts: aborting a mount whose server never answers a
// request fails the call waiting on it, where it would otherwise wait
// for ever.
func TestWatchdogAborts(t *testing.T) {
	prereq.FUSE(t)
	prereq.Root(t, "aborting a FUSE connection through fusectl")
	m := newMemClient()
	dir := t.TempDir()
	server, err := Mount(t.Context(), m, dir, Options{})
	require.NoError(t, err)
	stall := make(chan struct{})
	defer close(stall)
	t.Cleanup(func() { _ = server.Unmount() }) // after the abort it may fail
	watchMount(t, dir)
	m.mu.Lock()
	m.stall = stall
	m.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		_, err := unix.Getxattr(dir, "user.stalled", make([]byte, 16))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the stalled GETXATTR returned before the abort: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	errs := abortMounts()
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "aborted the mount at "+dir)
	select {
	case err := <-done:
		require.ErrorIs(t, err, syscall.ECONNABORTED)
		_, err = unix.Getxattr(dir, "user.after", make([]byte, 16))
		require.ErrorIs(t, err, syscall.ENOTCONN, "later calls")
	case <-time.After(10 * time.Second):
		t.Fatal("the abort did not end the stalled GETXATTR")
	}
}
