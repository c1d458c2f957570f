package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
)

func TestRepairFlags(t *testing.T) {
	data := t.TempDir()
	newDir := filepath.Join(t.TempDir(), "new")
	busy := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(busy, "notes.txt"), []byte("mine"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no data", []string{"--device", newDir}, "--data DIR is required"},
		{"no device", []string{"--data", data}, "--device NEWDIR is required"},
		{"bad ec", []string{"--data", data, "--device", newDir, "--ec", "four+two"}, "bad --ec"},
		{"position past the end", []string{"--data", data, "--device", newDir, "--ec", "4+2", "--position", "6"}, "devices 0 to 5"},
		{"position past a given ec", []string{"--data", data, "--device", newDir, "--ec", "2+1", "--position", "3"}, "a 2+1 store has devices 0 to 2"},
		{"negative position", []string{"--data", data, "--device", newDir, "--position", "-2"}, "bad --position -2"},
		{"bad rate", []string{"--data", data, "--device", newDir, "--rate", "1.5MiB"}, "bad --rate"},
		{"stray argument", []string{"--data", data, "--device", newDir, "dev2"}, "takes no arguments"},
		{"device of another position", []string{"--data", data, "--device", filepath.Join(data, "dev1"), "--position", "3"}, "is device 1's directory, not device 3's"},
		{"device not empty", []string{"--data", data, "--device", busy, "--position", "1"}, "holds notes.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(append([]string{"repair"}, tc.args...)...)
			require.Error(t, r.err)
			assert.Equal(t, exitUsage, r.code(), r.err.Error())
			assert.Contains(t, r.err.Error(), tc.want)
		})
	}
	ents, err := os.ReadDir(data)
	require.NoError(t, err)
	assert.Empty(t, ents, "bad flags touch nothing")
	assert.NoDirExists(t, newDir)
	ents, err = os.ReadDir(busy)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "a directory of other files is not made a device")
}

// repairedDirs is the device list after device pos moved to dir.
func repairedDirs(data string, pos int, dir string) []string {
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	dirs[pos] = dir
	return dirs
}

// requireRebuilt checks a store whose device was rebuilt: every device
// healthy, parity and checksums all good, the data as written, read
// without reconstruction.
func requireRebuilt(t *testing.T, dirs []string, td *storetest.Store) {
	t.Helper()
	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	assert.False(t, s.Info().Degraded, "%+v", s.Info().Devices)
	rep, err := s.Scrub(context.Background(), chunkstore.ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	assert.EqualValues(t, testStripes, rep.Checked)
	assert.Zero(t, rep.Damaged, "%+v", rep.Problems)
	require.NoError(t, s.Close())
	stats := td.Verify(t, dirs)
	assert.Zero(t, stats.Reconstructions, "every shard is in place")
}

func TestRepairOntoNewDirectory(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 10)
	require.NoError(t, os.RemoveAll(filepath.Join(data, "dev2")))
	newDir := filepath.Join(t.TempDir(), "disk7") // does not exist yet

	// Device 2 is found from the store: it is the one device missing.
	res := run("repair", "--data", data, "--device", newDir)
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	sum := res.summary(t, "repair:")
	assert.EqualValues(t, 2, sum["device"])
	assert.EqualValues(t, testStripes, sum["stripes"])
	assert.EqualValues(t, testStripes, sum["rebuilt"])
	assert.Zero(t, sum["skipped"])
	assert.Zero(t, sum["unrecoverable"])
	assert.EqualValues(t, 1, sum["complete"])
	assert.Contains(t, res.stderr, "repair: rebuilding device 2 in "+newDir)
	assert.Contains(t, res.stderr, "repair: device 2: 67/67 stripes (100%)", "progress lines when stderr is not a terminal")
	assert.Contains(t, res.stderr, "device 2 is now "+newDir, "the operator learns the device moved")

	dirs := repairedDirs(data, 2, newDir)
	requireRebuilt(t, dirs, td)

	// Later commands name the devices one by one.
	args := []string{"scrub"}
	for _, d := range dirs {
		args = append(args, "--device", d)
	}
	res = run(args...)
	require.NoError(t, res.err)
	sum = res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.Zero(t, sum["damaged"])
}

func TestRepairAtDefaultPath(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 11)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	// Two devices lost: the one given by its own path is rebuilt first.
	require.NoError(t, os.RemoveAll(dirs[4]))
	require.NoError(t, os.RemoveAll(dirs[0]))
	require.NoError(t, os.MkdirAll(filepath.Join(dirs[4], "lost+found"), 0o700)) // a freshly made file system

	res := run("repair", "--data", data, "--device", dirs[4])
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	sum := res.summary(t, "repair:")
	assert.EqualValues(t, 4, sum["device"])
	assert.EqualValues(t, testStripes, sum["rebuilt"])
	assert.Contains(t, res.stderr, "device 0 ("+dirs[0]+") is missing too")
	assert.NotContains(t, res.stderr, "is now", "the device is where the store expects it")

	// A new directory elsewhere is the one missing device left.
	newDir := t.TempDir()
	res = run("repair", "--data", data, "--device", newDir)
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	assert.EqualValues(t, 0, res.summary(t, "repair:")["device"])
	requireRebuilt(t, repairedDirs(data, 0, newDir), td)
}

func TestRepairAsksWhichDevice(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 12)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	require.NoError(t, os.RemoveAll(dirs[1]))
	require.NoError(t, os.RemoveAll(dirs[3]))
	newDir := t.TempDir()

	res := run("repair", "--data", data, "--device", newDir)
	require.Error(t, res.err)
	assert.Equal(t, exitUsage, res.code())
	assert.Contains(t, res.err.Error(), "devices [1 3] cannot be used")
	assert.Contains(t, res.err.Error(), "--position N")
	assert.Empty(t, res.stdout)

	res = run("repair", "--data", data, "--device", newDir, "--position", "3")
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	assert.EqualValues(t, 3, res.summary(t, "repair:")["device"])

	// As the note after it says, the default path now points at the moved
	// device, so --data finds it; then device 1 is rebuilt in place.
	assert.Contains(t, res.stderr, "ln -s "+newDir+" "+dirs[3])
	require.NoError(t, os.Symlink(newDir, dirs[3]))
	require.NoError(t, os.Mkdir(dirs[1], 0o755))
	res = run("repair", "--data", data, "--device", dirs[1])
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	assert.EqualValues(t, 1, res.summary(t, "repair:")["device"])
	assert.NotContains(t, res.stderr, "missing too")
	requireRebuilt(t, dirs, td)
}

func TestRepairRefusesHealthyDevice(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 13)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)

	res := run("repair", "--data", data, "--device", dirs[0])
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "healthy member of the store")
	assert.Contains(t, res.err.Error(), "target scrub")

	res = run("repair", "--data", data, "--device", t.TempDir())
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "every device of the store")
	assert.Contains(t, res.err.Error(), "nothing to rebuild")
	requireRebuilt(t, dirs, td)
}

func TestRepairResumes(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 14)
	require.NoError(t, os.RemoveAll(filepath.Join(data, "dev1")))
	newDir := t.TempDir()

	// Interrupted at the first progress line, as Ctrl-C would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := &cancelOnWrite{match: "stripes (", cancel: cancel}
	first := runCLI(ctx, stop, "repair", "--data", data, "--device", newDir)
	require.Error(t, first.err)
	assert.ErrorIs(t, first.err, context.Canceled)
	assert.Equal(t, 1, first.code())
	assert.Contains(t, first.err.Error(), "run the same command again to resume")
	firstSum := first.summary(t, "repair:")
	assert.Zero(t, firstSum["complete"])
	require.Positive(t, firstSum["rebuilt"])
	require.Less(t, firstSum["rebuilt"], int64(testStripes))

	// The same command continues where the first stopped.
	res := run("repair", "--data", data, "--device", newDir)
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "repair: resuming the rebuild of device 1 in "+newDir)
	sum := res.summary(t, "repair:")
	assert.EqualValues(t, 1, sum["device"])
	assert.EqualValues(t, 1, sum["complete"])
	assert.Equal(t, firstSum["rebuilt"], sum["skipped"], "the stripes done before the interrupt are not done again")
	assert.EqualValues(t, testStripes, sum["rebuilt"]+sum["skipped"])
	requireRebuilt(t, repairedDirs(data, 1, newDir), td)
}

// TestRepairTakesTheStoresGeometry: without --ec, repair --data finds a
// 2+1 store's three devices, also when the last one is gone, and rebuilds
// it; an --ec that is not the store's, or a --position past its last
// device, is misuse (exit 2) and writes nothing.
func TestRepairTakesTheStoresGeometry(t *testing.T) {
	data := t.TempDir()
	g := chunkstore.Geometry{Data: 2, Parity: 1}
	dirs := chunkstore.DeviceDirs(data, g)
	s, err := chunkstore.CreateDirs(dirs, chunkstore.WithGeometry(g), chunkstore.WithStripeUnit(storetest.Unit))
	require.NoError(t, err)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	want := storetest.RandBytes(rand.New(rand.NewPCG(15, 15)), 1<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(dirs[2]))
	newDir := filepath.Join(t.TempDir(), "new")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ec", "4+2"}, "--ec 4+2: the store is 2+1"},
		{[]string{"--ec", "2+2"}, "--ec 2+2: the store is 2+1"},
		{[]string{"--position", "3"}, "bad --position 3: the store has devices 0 to 2"},
	} {
		res := run(append([]string{"repair", "--data", data, "--device", newDir}, tc.args...)...)
		require.Error(t, res.err, "%v", tc.args)
		assert.Equal(t, exitUsage, res.code(), "%v: %v", tc.args, res.err)
		assert.Contains(t, res.err.Error(), tc.want, "%v", tc.args)
		assert.NotContains(t, res.err.Error(), "\n", "one line")
		assert.Empty(t, res.stdout, "%v", tc.args)
		assert.NoDirExists(t, newDir, "%v: nothing is written", tc.args)
	}
	res := run("repair", "--data", data, "--device", newDir, "--ec", "4+2")
	assert.ErrorIs(t, res.err, chunkstore.ErrGeometryMismatch, "the store's error is beneath")

	// Device 2 is the one the store cannot use; --ec is left out.
	res = run("repair", "--data", data, "--device", newDir)
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	sum := res.summary(t, "repair:")
	assert.EqualValues(t, 2, sum["device"])
	assert.Positive(t, sum["rebuilt"])
	assert.Zero(t, sum["unrecoverable"])
	assert.EqualValues(t, 1, sum["complete"])

	// In place, with the store's geometry given as it is.
	require.NoError(t, os.Symlink(newDir, dirs[2]))
	require.NoError(t, os.RemoveAll(dirs[0]))
	res = run("repair", "--data", data, "--device", dirs[0], "--ec", "2+1")
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	assert.EqualValues(t, 0, res.summary(t, "repair:")["device"])

	s, err = chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	assert.False(t, s.Info().Degraded, "%+v", s.Info().Devices)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the volume reads back as written")
}

func TestProgressDisplay(t *testing.T) {
	t.Run("lines", func(t *testing.T) {
		var buf bytes.Buffer
		d := newProgressDisplay(&buf, "repair: device 3")
		assert.False(t, d.tty, "a buffer is not a terminal")
		for i := int64(1); i <= 1000; i++ {
			d.update(chunkstore.Progress{Stripes: 1000, Done: i, Bytes: i * 20 << 10})
		}
		d.finish()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		assert.Equal(t, "repair: device 3: 1/1000 stripes (0%), 20.0 KiB read", lines[0])
		assert.Equal(t, "repair: device 3: 1000/1000 stripes (100%), 19.5 MiB read", lines[len(lines)-1])
		assert.LessOrEqual(t, len(lines), 22, "a line every 5 %%, not every stripe")
	})
	t.Run("bar", func(t *testing.T) {
		var buf bytes.Buffer
		d := newProgressDisplay(&buf, "repair: device 3")
		d.tty = true // as on a terminal
		for i := int64(1); i <= 10; i++ {
			d.update(chunkstore.Progress{Stripes: 10, Done: i})
		}
		d.finish()
		out := buf.String()
		assert.Contains(t, out, "repair: device 3")
		assert.Contains(t, out, "100%")
		assert.Contains(t, out, "(10/10, ", "the bar counts stripes")
		assert.NotContains(t, out, "stripes (", "no plain lines on a terminal")
	})
	t.Run("no stripes", func(t *testing.T) {
		var buf bytes.Buffer
		d := newProgressDisplay(&buf, "scrub")
		d.update(chunkstore.Progress{})
		d.finish()
		assert.Empty(t, buf.String())
	})
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 20 << 20: "20.0 MiB", 3 << 40: "3.0 TiB",
	} {
		assert.Equal(t, want, formatBytes(n), n)
	}
}
