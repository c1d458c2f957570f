package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// The erasure-coded namespace of TestErasureCodedNamespace: 4+2 with the
// default stripe unit, so a stripe holds 256 KiB of data and a shard slot
// is 4 KiB of header and 64 KiB of payload on each device.
const (
	ecUnit   = chunkstore.DefaultStripeUnit
	ecStripe = 4 * ecUnit
	ecSlot   = 4096 + ecUnit
	ecVolume = 64 << 20
	ecLost   = 2 // the device directory deleted while the target runs
)

// TestErasureCodedNamespace runs `target serve` with an ec namespace and
// talks to it with the host library from this process. It writes a
// pattern in whole stripes (so every shard slot below the high-water mark
// holds a live stripe), deletes a device directory under the running
// target and checks that reads stay correct and writes continue, flips
// random bytes in shard files and checks that reads stay correct; then,
// with the target stopped, `target scrub` finds and repairs every
// corrupted shard, `target repair` rebuilds the lost device, a second
// scrub finds nothing, and a restarted target serves every byte.
func TestErasureCodedNamespace(t *testing.T) {
	requireStoreCommands(t)
	data := t.TempDir()
	shm := fmt.Sprintf("shm://ec-it-%d", os.Getpid())
	nqn := "nqn.2026-11.io.capsule:ec-integration"
	args := []string{"serve", "--listen", shm, "--data", data, "--namespace", "ec:vol0:64MiB", "--nqn", nqn,
		"--scrub-rate", "0"} // the offline scrub below must find the damage
	d := startDaemon(t, "capsule target ready", args...)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	for _, dir := range dirs {
		require.FileExists(t, filepath.Join(dir, "identity"), "the first start creates the devices")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := host.Dial(ctx, shm, host.WithSubsystem(nqn))
	require.NoError(t, err)
	defer c.Close()
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	require.Equal(t, int64(ecVolume), ns.Size())

	r := rand.New(rand.NewPCG(4, 2))
	var want []byte // the volume's first len(want) bytes; the rest is unwritten
	write := func(n int) {
		t.Helper()
		p := storetest.RandBytes(r, n)
		for off := 0; off < n; off += 1 << 20 {
			_, err := ns.WriteAt(p[off:off+1<<20], int64(len(want)+off))
			require.NoError(t, err)
		}
		require.NoError(t, ns.Flush())
		want = append(want, p...)
	}
	verify := func(what string) {
		t.Helper()
		got := make([]byte, len(want)+ecStripe)
		_, err := ns.ReadAt(got, 0)
		require.NoError(t, err, what)
		require.True(t, bytes.Equal(want, got[:len(want)]), "%s: the data reads back as written", what)
		require.Equal(t, make([]byte, ecStripe), got[len(want):], "%s: unwritten space reads as zeros", what)
	}

	write(8 << 20)
	verify("healthy")

	// A device directory disappears under the running target.
	require.NoError(t, os.RemoveAll(dirs[ecLost]))
	verify("device deleted")
	write(4 << 20) // the flush's commit finds the device gone and writes on without it
	write(4 << 20)
	verify("writes after the device was deleted")

	// Silent corruption: random bytes flipped in one shard of each of 12
	// distinct stripes, on the devices still there.
	stripes := len(want) / ecStripe
	corrupted := r.Perm(stripes)[:12]
	for _, slot := range corrupted {
		dev := r.IntN(len(dirs) - 1)
		if dev >= ecLost {
			dev++
		}
		storetest.FlipShardUnit(t, r, dirs[dev], slot, ecUnit)
	}
	verify("shards corrupted")
	require.NoError(t, c.Close())
	d.stop(t)

	// Scrub with the device still gone: every stripe lacks its shard there
	// (that is for repair), and the corrupted ones are listed and repaired.
	res := runStoreCommand(t, "scrub", "--data", data)
	require.Zero(t, res.code, "scrub:\n%s%s", res.stdout, res.stderr)
	sum := storetest.Summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, stripes, sum["checked"], "every stripe written")
	assert.EqualValues(t, stripes, sum["damaged"], "every stripe misses its shard on the deleted device")
	assert.EqualValues(t, len(corrupted), sum["shards_repaired"], "each corrupted shard is repaired:\n%s", res.stdout)
	assert.Zero(t, sum["unrecoverable"])
	listed := 0
	for _, line := range strings.Split(res.stdout, "\n") {
		if strings.HasPrefix(line, "damaged: volume \"vol0\"") {
			listed++
		}
	}
	assert.Equal(t, len(corrupted), listed, "each corrupted stripe is named:\n%s", res.stdout)
	assert.Contains(t, res.stderr, fmt.Sprintf("device %d (%s) is missing", ecLost, dirs[ecLost]))

	res = runStoreCommand(t, "repair", "--data", data, "--device", dirs[ecLost])
	require.Zero(t, res.code, "repair:\n%s%s", res.stdout, res.stderr)
	sum = storetest.Summary(t, res.stdout, "repair:")
	assert.EqualValues(t, ecLost, sum["device"])
	assert.EqualValues(t, stripes, sum["rebuilt"])
	assert.Zero(t, sum["unrecoverable"])
	assert.EqualValues(t, 1, sum["complete"])

	res = runStoreCommand(t, "scrub", "--data", data)
	require.Zero(t, res.code, "second scrub:\n%s%s", res.stdout, res.stderr)
	sum = storetest.Summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, stripes, sum["checked"])
	assert.Zero(t, sum["damaged"], "scrub and repair left nothing to find:\n%s", res.stdout)

	// Every flushed byte survived the loss, the corruption and the repairs.
	d = startDaemon(t, "capsule target ready", args...)
	c, err = host.Dial(ctx, shm, host.WithSubsystem(nqn))
	require.NoError(t, err)
	ns, err = c.Namespace(1)
	require.NoError(t, err)
	verify("after restart")
	require.NoError(t, c.Close())
	d.stop(t)
}
