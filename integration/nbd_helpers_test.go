package integration

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// startBinary runs bin/NAME with args and waits for a stdout line that
// begins with readyPrefix; the test stops it by pid (daemon.stop).
func startBinary(t *testing.T, name, readyPrefix string, args ...string) *daemon {
	t.Helper()
	return startCommand(t, name, readyPrefix, append([]string{filepath.Join(binDir, name)}, args...))
}

// startBridge runs `mount --nbd 127.0.0.1:PORT` (PORT 0: a free one)
// against target and returns it with its nbd:// URI (with export name).
func startBridge(t *testing.T, target, nqn, listen, export string, extra ...string) (*daemon, string) {
	t.Helper()
	args := append([]string{"--target", target, "--nqn", nqn, "--nbd", listen, "--export", export}, extra...)
	d := startBinary(t, "mount", "capsule nbd ready", args...)
	addr := field(d.ready, "listen")
	require.NotEmpty(t, addr, d.ready)
	return d, "nbd://" + addr + "/" + export
}

// kill9 kills the process by pid with SIGKILL and waits for it; its
// Cleanup stop then does nothing.
func (d *daemon) kill9(t *testing.T) {
	t.Helper()
	d.stopped.Do(func() {
		require.NoError(t, syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL))
		<-d.exited
	})
}

// runTool runs a client, failing the test with its output on error.
// The client's own directory leads PATH, so that a script such as
// nbdsh finds the python3 its Debian package was built for, not another
// one earlier in PATH.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	path := prereq.Tool(t, name)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(path)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

// fioArgs are the options every fio run here shares: the nbd engine on
// uri, and fio's verification of what it wrote (crc32c in a header per
// block, so a verify-only pass later can check it). fio keeps no verify
// state file: it would write one per job into the working directory, the
// package's source directory.
func fioArgs(uri string, extra ...string) []string {
	return append([]string{"--ioengine=nbd", "--uri=" + uri, "--direct=1", "--verify=crc32c",
		"--verify_state_save=0", "--verify_fatal=1", "--group_reporting=1", "--output-format=terse", "--terse-version=3"}, extra...)
}

func sha256File(t *testing.T, path string, n int64) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.CopyN(h, f, n)
	require.NoError(t, err)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// uniqueShm names an shm:// endpoint no other test uses.
func uniqueShm(what string) string {
	return fmt.Sprintf("shm://%s-%d-%d", what, os.Getpid(), time.Now().UnixNano()%1e9)
}
