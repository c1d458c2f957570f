package integration

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/internal/storetest"
)

const nbdNQN = "nqn.2026-11.io.capsule:nbd-integration"

// nbdsh drives libnbd's Python binding: every command, FUA, and
// requests out of range or unaligned (strict mode off, so they reach the
// server) that must each fail alone while the session goes on.
const nbdshScript = `
import errno
size = h.get_size()
assert size == 128 << 20, size
buf = bytes(range(256)) * 256
h.pwrite(buf, 1 << 20)
assert h.pread(len(buf), 1 << 20) == buf
h.flush()
h.zero(8192, 1 << 20)
assert h.pread(8192, 1 << 20) == bytes(8192)
h.trim(8192, (1 << 20) + 8192)
h.pwrite(buf[:4096], (1 << 20) + 16384, nbd.CMD_FLAG_FUA)
assert h.pread(4096, (1 << 20) + 16384) == buf[:4096]
h.set_strict_mode(0)
bad = [
    ("read past the end", lambda: h.pread(4096, size - 512), errno.EINVAL),
    ("write past the end", lambda: h.pwrite(bytes(4096), size - 512), errno.ENOSPC),
    ("zero past the end", lambda: h.zero(8192, size - 4096), errno.ENOSPC),
    ("trim past the end", lambda: h.trim(4096, size), errno.EINVAL),
    ("unaligned read", lambda: h.pread(512, 100), errno.EINVAL),
    ("unaligned write", lambda: h.pwrite(bytes(100), 0), errno.EINVAL),
]
for what, fn, want in bad:
    try:
        fn()
    except nbd.Error as e:
        assert e.errnum == want, (what, e.errnum, e)
    else:
        raise AssertionError(what + ": succeeded")
assert h.pread(4096, (1 << 20) + 32768) == buf[32768:36864], "the session survived"
h.flush()
print("nbdsh ok")
`

// TestNBDRealClients serves a memory namespace through the bridge over
// iwarp and drives it with clients no one here wrote: nbdinfo, nbdcopy,
// nbdsh, fio's nbd engine with verification, and qemu-img.
func TestNBDRealClients(t *testing.T) {
	for _, tool := range []string{"nbdinfo", "nbdcopy", "nbdsh", "fio", "qemu-img"} {
		prereq.Tool(t, tool)
	}
	tgt := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0",
		"--namespace", "mem:128MiB", "--nqn", nbdNQN)
	url := strings.Split(field(tgt.ready, "listeners"), ",")[0]
	bridge, uri := startBridge(t, url, nbdNQN, "127.0.0.1:0", "vol")

	t.Run("nbdinfo", func(t *testing.T) {
		assert.Equal(t, "134217728", strings.TrimSpace(runTool(t, "nbdinfo", "--size", uri)))
		var list struct {
			Exports []struct {
				Name        string `json:"export-name"`
				Description string `json:"description"`
				Size        int64  `json:"export-size"`
				MultiConn   bool   `json:"can_multi_conn"`
				Flush       bool   `json:"can_flush"`
				FUA         bool   `json:"can_fua"`
				Trim        bool   `json:"can_trim"`
				Zero        bool   `json:"can_zero"`
				ReadOnly    bool   `json:"is_read_only"`
				MinBlock    int    `json:"block_size_minimum"`
				MaxBlock    int    `json:"block_size_maximum"`
			} `json:"exports"`
		}
		out := runTool(t, "nbdinfo", "--list", "--json", uri)
		require.NoError(t, json.Unmarshal([]byte(out), &list), out)
		require.Len(t, list.Exports, 1, out)
		e := list.Exports[0]
		assert.Equal(t, "vol", e.Name)
		assert.Contains(t, e.Description, nbdNQN)
		assert.Equal(t, int64(128<<20), e.Size)
		assert.True(t, e.MultiConn && e.Flush && e.FUA && e.Trim && e.Zero, out)
		assert.False(t, e.ReadOnly)
		assert.Equal(t, 512, e.MinBlock)
		assert.Equal(t, 32<<20, e.MaxBlock)
	})

	t.Run("nbdcopy", func(t *testing.T) {
		dir := t.TempDir()
		src, back := filepath.Join(dir, "src"), filepath.Join(dir, "back")
		r := rand.New(rand.NewPCG(7, 7))
		require.NoError(t, os.WriteFile(src, storetest.RandBytes(r, 48<<20), 0o600))
		runTool(t, "nbdcopy", "--connections=4", "--flush", src, uri)
		runTool(t, "nbdcopy", "--connections=4", uri, back)
		assert.Equal(t, sha256File(t, src, 48<<20), sha256File(t, back, 48<<20), "what went in came out")
	})

	t.Run("nbdsh", func(t *testing.T) {
		assert.Contains(t, runTool(t, "nbdsh", "-u", uri, "-c", nbdshScript), "nbdsh ok")
	})

	t.Run("fio", func(t *testing.T) {
		// Four jobs: four NBD connections (CAN_MULTI_CONN), each with
		// 16 requests in flight on its own range, verified as they go.
		out := runTool(t, "fio", fioArgs(uri, "--name=verify", "--rw=randwrite", "--bs=4k", "--iodepth=16",
			"--numjobs=4", "--size=8m", "--offset=64m", "--offset_increment=8m", "--do_verify=1")...)
		assert.Contains(t, out, "verify;", "fio ran its jobs")
		out = runTool(t, "fio", fioArgs(uri, "--name=seq", "--rw=write", "--bs=1m", "--iodepth=4",
			"--numjobs=2", "--size=16m", "--offset=96m", "--offset_increment=16m", "--do_verify=1", "--verify=sha256")...)
		assert.Contains(t, out, "seq;")
	})

	t.Run("qemu-img", func(t *testing.T) {
		dir := t.TempDir()
		img := filepath.Join(dir, "img.raw")
		r := rand.New(rand.NewPCG(8, 8))
		require.NoError(t, os.WriteFile(img, storetest.RandBytes(r, 128<<20), 0o600))
		runTool(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", img, uri)
		out := runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", img, uri)
		assert.Contains(t, out, "Images are identical")
	})

	bridge.stop(t)
	assert.Contains(t, bridge.stderr.String(), "answering the requests in flight")
}
