package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// binDir holds bin/target and bin/mount built once for the package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "capsule-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, cmd := range []string{"target", "mount"} {
		out, err := exec.Command("go", "build", "-race", "-o", filepath.Join(dir, cmd), "../cmd/"+cmd).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", cmd, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a bin/target process a test started; the test stops it by pid.
type daemon struct {
	cmd     *exec.Cmd
	ready   string // the ready line
	stderr  *lockedBuffer
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // what Wait returned; read after exited is closed
	stopped sync.Once
}

// lockedBuffer collects a process's stderr while tests read it.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDaemon runs bin/target with args and waits for a stdout line that
// begins with readyPrefix.
func startDaemon(t *testing.T, readyPrefix string, args ...string) *daemon {
	t.Helper()
	return startCommand(t, "target", readyPrefix, append([]string{filepath.Join(binDir, "target")}, args...))
}

// startCommand runs argv (a binary, or `ip netns exec NS` and a binary,
// which execs it under the same pid) in a temporary directory (relative
// defaults such as ./data land there, not in the source tree) and waits
// for a stdout line that begins with readyPrefix; the test stops it by
// pid (daemon.stop).
func startCommand(t *testing.T, name, readyPrefix string, argv []string) *daemon {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &daemon{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { d.stop(t) })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, readyPrefix) {
				select {
				case ready <- l:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	select {
	case d.ready = <-ready:
		return d
	case <-d.exited:
		t.Fatalf("%s exited before it was ready: %v; stderr:\n%s", name, d.waitErr, d.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after 60s; stderr:\n%s", name, d.stderr)
	}
	return nil
}

// stop sends SIGTERM to the daemon's pid and requires a clean exit. It
// acts once; later calls (the Cleanup after an explicit stop) do nothing.
func (d *daemon) stop(t *testing.T) {
	d.stopped.Do(func() {
		select {
		case <-d.exited:
			require.NoError(t, d.waitErr, "target exited by itself; stderr:\n%s", d.stderr)
			return
		default:
		}
		require.NoError(t, syscall.Kill(d.cmd.Process.Pid, syscall.SIGTERM))
		select {
		case <-d.exited:
			require.NoError(t, d.waitErr, "target did not exit cleanly on SIGTERM; stderr:\n%s", d.stderr)
		case <-time.After(30 * time.Second):
			syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
			t.Fatalf("target ignored SIGTERM for 30s; stderr:\n%s", d.stderr)
		}
	})
}

// field returns the value of key=value in line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func runTarget(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "target"), args...).CombinedOutput()
	require.NoError(t, err, "target %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}
