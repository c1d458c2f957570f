package host

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// identityDir is a stand-in for /etc: files written into a temporary
// directory, named as LoadIdentity expects.
func identityDir(t *testing.T, files map[string]string) IdentityFiles {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return IdentityFiles{
		HostNQN:    filepath.Join(dir, "hostnqn"),
		HostID:     filepath.Join(dir, "hostid"),
		MachineIDs: []string{filepath.Join(dir, "machine-id"), filepath.Join(dir, "dbus-machine-id")},
	}
}

func TestLoadIdentityFromMachineID(t *testing.T) {
	const mid = "3d1219c7c4c5404aaa1f6d2a48adfda4"
	files := identityDir(t, map[string]string{"machine-id": mid + "\n"})
	a, err := LoadIdentity(files)
	require.NoError(t, err)
	b, err := LoadIdentity(files)
	require.NoError(t, err)
	assert.Equal(t, a, b, "stable")

	rest, ok := strings.CutPrefix(a.NQN, "nqn.2014-08.org.nvmexpress:uuid:")
	require.True(t, ok, a.NQN)
	u, err := uuid.Parse(rest)
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(5), u.Version(), "name-based (SHA-1)")
	assert.Equal(t, uuid.RFC4122, u.Variant())
	assert.Equal(t, [16]byte(u), a.ID, "HOSTID is the NQN's UUID, as nvme-cli pairs them")
	assert.NotContains(t, strings.ReplaceAll(a.NQN, "-", ""), mid, "the machine ID itself is not disclosed")
	assert.Equal(t, "machine ID", a.Source)

	other, err := LoadIdentity(identityDir(t, map[string]string{"machine-id": "0123456789abcdef0123456789abcdef"}))
	require.NoError(t, err)
	assert.NotEqual(t, a.NQN, other.NQN, "another machine, another NQN")
	assert.NotEqual(t, a.ID, other.ID)

	dbus, err := LoadIdentity(identityDir(t, map[string]string{"dbus-machine-id": mid}))
	require.NoError(t, err)
	assert.Equal(t, a.NQN, dbus.NQN, "the D-Bus copy of the machine ID stands in for /etc/machine-id")
}

func TestLoadIdentityFromHostNQNFile(t *testing.T) {
	const nqn = "nqn.2014-08.org.nvmexpress:uuid:8e5b7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
	files := identityDir(t, map[string]string{"hostnqn": "  " + nqn + "\n\n", "machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4"})
	id, err := LoadIdentity(files)
	require.NoError(t, err)
	assert.Equal(t, nqn, id.NQN)
	assert.Equal(t, files.HostNQN, id.Source)
	assert.Equal(t, [16]byte(uuid.MustParse("8e5b7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b")), id.ID,
		"without a hostid file, a UUID-form NQN gives the HOSTID")

	// A hostid file wins for HOSTID.
	const hid = "11111111-2222-4333-8444-555555555555"
	files = identityDir(t, map[string]string{"hostnqn": nqn, "hostid": hid + "\n"})
	id, err = LoadIdentity(files)
	require.NoError(t, err)
	assert.Equal(t, nqn, id.NQN)
	assert.Equal(t, [16]byte(uuid.MustParse(hid)), id.ID)

	// A NQN of another form: HOSTID from the machine ID, else from the NQN.
	const named = "nqn.2026-11.io.example:host-a"
	withMID, err := LoadIdentity(identityDir(t, map[string]string{"hostnqn": named, "machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4"}))
	require.NoError(t, err)
	fromMID, err := LoadIdentity(identityDir(t, map[string]string{"machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4"}))
	require.NoError(t, err)
	assert.Equal(t, named, withMID.NQN)
	assert.Equal(t, fromMID.ID, withMID.ID)
	alone, err := LoadIdentity(identityDir(t, map[string]string{"hostnqn": named}))
	require.NoError(t, err)
	again, err := LoadIdentity(identityDir(t, map[string]string{"hostnqn": named}))
	require.NoError(t, err)
	assert.Equal(t, alone.ID, again.ID, "stable")
	assert.NotZero(t, alone.ID)
}

func TestLoadIdentityErrors(t *testing.T) {
	_, err := LoadIdentity(identityDir(t, nil))
	require.ErrorIs(t, err, fs.ErrNotExist, "nothing to go by")

	_, err = LoadIdentity(identityDir(t, map[string]string{"hostnqn": "nqn.2026-11.io.example:" + strings.Repeat("x", 300)}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hostnqn")
	assert.NotErrorIs(t, err, fs.ErrNotExist)

	_, err = LoadIdentity(identityDir(t, map[string]string{"hostid": "zz", "machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hostid")

	// An empty host NQN file is no host NQN file.
	id, err := LoadIdentity(identityDir(t, map[string]string{"hostnqn": "\n", "machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4"}))
	require.NoError(t, err)
	assert.Equal(t, "machine ID", id.Source)

	// A file that exists but cannot be read is an error, not absence.
	files := identityDir(t, nil)
	require.NoError(t, os.Mkdir(files.HostNQN, 0o755))
	_, err = LoadIdentity(files)
	require.Error(t, err)
	assert.NotErrorIs(t, err, fs.ErrNotExist)
}

// TestOptionsDefaultIdentity: without options the config carries the
// machine's identity; WithHostNQN and WithHostID override each part.
func TestOptionsDefaultIdentity(t *testing.T) {
	sys, err := SystemIdentity()
	require.NoError(t, err)
	c, err := newConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, sys.NQN, c.hostNQN)
	assert.Equal(t, sys.ID, c.hostID)

	c, err = newConfig([]Option{WithHostNQN("nqn.2026-11.io.example:other")})
	require.NoError(t, err)
	assert.Equal(t, "nqn.2026-11.io.example:other", c.hostNQN)
	assert.Equal(t, sys.ID, c.hostID)

	id := [16]byte{1, 2, 3}
	c, err = newConfig([]Option{WithHostID(id)})
	require.NoError(t, err)
	assert.Equal(t, sys.NQN, c.hostNQN)
	assert.Equal(t, id, c.hostID)
}

// identityChildEnv makes the test binary a host that dials the target
// the variable names and prints the identity it connected with.
const identityChildEnv = "CAPSULE_HOST_IDENTITY_CHILD"

// TestIdentityChild is the child's body; it does nothing in a normal run.
func TestIdentityChild(t *testing.T) {
	addr := os.Getenv(identityChildEnv)
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, WithSubsystem(targetNQN), WithQueues(1), WithLogger(testLogger(t)))
	require.NoError(t, err)
	fmt.Printf("identity %s %x\n", c.HostNQN(), c.cfg.hostID)
	require.NoError(t, c.Close())
}

// TestIdentityTwoProcesses runs two host processes (this test binary
// again) against a target in this process that admits only this
// machine's host NQN: both connect, and both present the same NQN and
// HOSTID, the ones this process derives.
func TestIdentityTwoProcesses(t *testing.T) {
	sys, err := SystemIdentity()
	require.NoError(t, err)
	if sys.Source == "random" {
		prereq.Missing(t, "no %s and no %s: this machine has no stable host identity", HostNQNFile, MachineIDFile)
	}
	rt := newTarget(t, "tcp://127.0.0.1:0", 1<<20, 512, []string{sys.NQN})
	var got []string
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIdentityChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), identityChildEnv+"="+rt.addr)
		out, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "child:\n%s", out)
		var line string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "identity ") {
				line = l
			}
		}
		require.NotEmpty(t, line, "child printed no identity:\n%s", out)
		got = append(got, line)
	}
	want := fmt.Sprintf("identity %s %x", sys.NQN, sys.ID)
	assert.Equal(t, []string{want, want}, got)
}
