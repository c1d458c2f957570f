package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// startFileTarget runs `target serve` with its default namespaces on an
// shm:// and an iwarp:// listener, and returns it with their URLs.
func startFileTarget(t *testing.T, data string, extra ...string) (*daemon, string, string) {
	t.Helper()
	shm := "shm://fuse-it-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().Format("150405.000000")
	args := append([]string{"serve", "--listen", shm, "--listen", "iwarp://127.0.0.1:0", "--data", data,
		"--scrub-rate", "0"}, extra...)
	d := startDaemon(t, "capsule target ready", args...)
	var iwarp string
	for _, l := range strings.Split(field(d.ready, "listeners"), ",") {
		if strings.HasPrefix(l, "iwarp://") {
			iwarp = l
		}
	}
	require.NotEmpty(t, iwarp, d.ready)
	return d, shm, iwarp
}

// fuseMount is a running `bin/mount` process and its mountpoint.
type fuseMount struct {
	*daemon
	dir string
}

// mountFUSE runs `mount --target url [args] DIR` on a new directory and
// waits for "capsule mounted at DIR". When the test ends it stops the
// process by pid with SIGTERM and requires a clean exit and unmount.
func mountFUSE(t *testing.T, url string, args ...string) *fuseMount {
	t.Helper()
	return mountFUSEFrom(t, filepath.Join(binDir, "mount"), url, args...)
}

// mountFUSEFrom is mountFUSE with the mount binary at bin.
func mountFUSEFrom(t *testing.T, bin, url string, args ...string) *fuseMount {
	t.Helper()
	prereq.FUSE(t)
	dir := t.TempDir()
	args = append(append([]string{"--target", url}, args...), dir)
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &daemon{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	m := &fuseMount{daemon: d, dir: dir}
	t.Cleanup(func() {
		m.stop(t)
		require.False(t, isMounted(t, dir), "%s is still mounted after the mount process exited", dir)
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	select {
	case d.ready = <-lines:
		require.Equal(t, "capsule mounted at "+dir, d.ready)
		require.True(t, isMounted(t, dir), "%s is not in mountinfo after the ready line", dir)
		return m
	case <-d.exited:
		t.Fatalf("mount exited before it was ready: %v; stderr:\n%s", d.waitErr, d.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("mount not ready after 60s; stderr:\n%s", d.stderr)
	}
	return nil
}

// path returns name inside the mount.
func (m *fuseMount) path(name ...string) string {
	return filepath.Join(append([]string{m.dir}, name...)...)
}

// isMounted reports whether dir is a mountpoint of this mount namespace.
func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// fileSHA256 is the hex sha256 of a whole file.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// runCommand runs a program no one here wrote and fails the test with
// its output on error; with CI=true a missing program is a failure.
func runCommand(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(prereq.Tool(t, name), args...).CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

var plain struct {
	once sync.Once
	dir  string
	err  error
}

// plainBinaries builds bin/target and bin/mount without the race
// detector, once, for the tests whose volume it would slow too much.
func plainBinaries(t *testing.T) string {
	t.Helper()
	plain.once.Do(func() {
		plain.dir = filepath.Join(binDir, "plain") // TestMain removes binDir
		plain.err = os.Mkdir(plain.dir, 0o755)
		for _, cmd := range []string{"target", "mount"} {
			if plain.err != nil {
				return
			}
			out, err := exec.Command("go", "build", "-o", filepath.Join(plain.dir, cmd), "../cmd/"+cmd).CombinedOutput()
			if err != nil {
				plain.err = fmt.Errorf("building %s: %v\n%s", cmd, err, out)
			}
		}
	})
	require.NoError(t, plain.err)
	return plain.dir
}
