package vfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/chunkstore/vfs/vfstest"
)

// implementations is the conformance matrix: one test body, every FS.
func implementations(t *testing.T) map[string]func(t *testing.T) vfs.FS {
	return map[string]func(t *testing.T) vfs.FS{
		"os":     func(t *testing.T) vfs.FS { return vfs.NewOS(t.TempDir()) },
		"mem":    func(t *testing.T) vfs.FS { return vfs.NewMem(vfs.WithHostDir(t.TempDir())) },
		"inject": func(t *testing.T) vfs.FS { return vfs.NewInjectFS(vfs.NewMem()) },
	}
}

func TestConformance(t *testing.T) {
	for name, mk := range implementations(t) {
		t.Run(name, func(t *testing.T) { vfstest.Conformance(t, mk) })
	}
}

func TestMemCrashKeepsOnlySynced(t *testing.T) {
	m := vfs.NewMem()
	// Synced file, synced entry: survives.
	f, err := m.OpenFile("kept", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("durable"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, m.SyncDir("."))
	// Written after the sync: lost.
	_, err = f.WriteAt([]byte("XX"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), 7)
	require.NoError(t, err)
	// Synced data but no directory sync: the file is lost.
	g, err := m.OpenFile("unlinked", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	_, err = g.WriteAt([]byte("x"), 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	// A rename without a directory sync is undone.
	require.NoError(t, m.Rename("kept", "renamed"))

	after := m.Crash()
	_, err = f.WriteAt([]byte("z"), 0)
	assert.ErrorIs(t, err, vfs.ErrCrashed, "the old FS is dead")
	_, err = m.Stat("kept")
	assert.ErrorIs(t, err, vfs.ErrCrashed)

	got, err := vfs.ReadFile(after, "kept")
	require.NoError(t, err)
	assert.Equal(t, "durable", string(got))
	_, err = after.Stat("unlinked")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = after.Stat("renamed")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestMemCrashTruncateAndRegrow(t *testing.T) {
	m := vfs.NewMem()
	f, err := m.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("."))
	_, err = f.WriteAt([]byte("abcdef"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Truncate(2))
	_, err = f.WriteAt([]byte("Z"), 4)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	got, err := vfs.ReadFile(m.Crash(), "f")
	require.NoError(t, err)
	assert.Equal(t, "ab\x00\x00Z", string(got))
}

func TestCrashClockStopsEveryFSAtOnce(t *testing.T) {
	clock := vfs.NewCrashClock()
	a := vfs.NewMem(vfs.WithCrashClock(clock))
	b := vfs.NewMem(vfs.WithCrashClock(clock))
	clock.CrashAfter(3)
	// WriteFile creates, writes, syncs (three operations), then renames.
	err := vfs.WriteFile(a, "x", []byte("1"))
	require.ErrorIs(t, err, vfs.ErrCrashed)
	assert.True(t, clock.Crashed())
	assert.EqualValues(t, 3, clock.Ops())
	_, err = b.Stat(".")
	assert.ErrorIs(t, err, vfs.ErrCrashed)
	// Three operations happened: create, write, sync. The rename did not.
	after := a.Crash()
	_, err = after.Stat("x")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestMemVanish(t *testing.T) {
	m := vfs.NewMem()
	f, err := m.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	m.Vanish()
	_, err = f.WriteAt([]byte("x"), 0)
	assert.ErrorIs(t, err, vfs.ErrVanished)
	_, err = m.List(".")
	assert.ErrorIs(t, err, vfs.ErrVanished)
	assert.NoError(t, f.Close())
}

func TestMemHostPath(t *testing.T) {
	_, err := vfs.NewMem().HostPath("db")
	assert.ErrorIs(t, err, vfs.ErrNotSupported)
	dir := t.TempDir()
	p, err := vfs.NewMem(vfs.WithHostDir(dir)).HostPath("db")
	require.NoError(t, err)
	assert.Equal(t, dir+"/db", p)
}

func TestInjectRules(t *testing.T) {
	in := vfs.NewInjectFS(vfs.NewMem())
	f, err := in.OpenFile("shards", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	remove := in.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Path: "shard*", After: 2, Times: 1, Err: syscall.ENOSPC})
	for i := range 2 {
		_, err := f.WriteAt([]byte("ok"), int64(2*i))
		require.NoError(t, err)
	}
	_, err = f.WriteAt([]byte("no"), 4)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	var pe *os.PathError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "write", pe.Op)
	_, err = f.WriteAt([]byte("ok"), 4)
	assert.NoError(t, err, "Times: 1 fires once")
	remove()

	in.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Torn: true})
	n, err := f.WriteAt([]byte("abcd"), 0)
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.Equal(t, 2, n, "a torn write lands half its bytes")
	n, err = f.WriteAtv([][]byte{[]byte("x"), []byte("yzw")}, 0)
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.Equal(t, 2, n, "a torn vectored write lands half its bytes")
	in.Clear()
	buf := make([]byte, 4)
	require.NoError(t, vfs.ReadFull(f, buf, 0))
	assert.Equal(t, "xyok", string(buf))

	in.Inject(vfs.Rule{Path: "other"})
	_, err = in.Stat("shards")
	assert.NoError(t, err, "the pattern does not match")
	_, err = in.Stat("other")
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.EqualValues(t, 2, in.Count(vfs.OpStat))
	assert.EqualValues(t, 1, in.Count(vfs.OpRead))
	in.ResetCounts()
	assert.Zero(t, in.Count(vfs.OpStat))
}

func TestOpNames(t *testing.T) {
	assert.Equal(t, "write", vfs.OpWrite.String())
	assert.True(t, vfs.OpSyncDir.Mutating())
	assert.False(t, vfs.OpRead.Mutating())
}

// TestMemSharedFlush checks MemFS's model of SharedFlush: a Sync of one
// file flushes the disk, which makes durable the bytes other files of any
// FS of the same clock wrote back over allocated pages, and nothing else.
func TestMemSharedFlush(t *testing.T) {
	clock := vfs.NewCrashClock()
	a := vfs.NewMem(vfs.WithCrashClock(clock))
	b := vfs.NewMem(vfs.WithCrashClock(clock))
	other := vfs.NewMem() // another disk
	open := func(m *vfs.MemFS, name string) vfs.File {
		f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE)
		require.NoError(t, err)
		require.NoError(t, m.SyncDir("."))
		return f
	}
	fa, fb, fo := open(a, "a"), open(b, "b"), open(other, "o")
	sa := fa.(vfs.SharedFlush)
	ida, ok := sa.Disk()
	require.True(t, ok)
	idb, _ := fb.(vfs.SharedFlush).Disk()
	ido, _ := fo.(vfs.SharedFlush).Disk()
	assert.Equal(t, ida, idb, "one clock, one disk")
	assert.NotEqual(t, ida, ido)

	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, 4096) }
	// Page 0 of a is allocated once a Sync made it durable; page 1 is
	// not (written after).
	_, err := fa.WriteAt(page('1'), 0)
	require.NoError(t, err)
	require.NoError(t, fa.Sync())
	var ranges [][2]int64
	require.NoError(t, sa.Allocated(func(off, n int64) { ranges = append(ranges, [2]int64{off, n}) }))
	assert.Equal(t, [][2]int64{{0, 4096}}, ranges)

	// Overwrite page 0, extend with page 1, write back, and flush the
	// disk through b: page 0 is durable, page 1 (unallocated) is not; a
	// Sync on the other disk would have flushed nothing of a.
	_, err = fa.WriteAtv([][]byte{page('2'), page('3')}, 0)
	require.NoError(t, err)
	require.NoError(t, sa.WriteBack())
	require.NoError(t, fo.Sync())
	_, err = fb.WriteAt([]byte("b"), 0)
	require.NoError(t, err)
	require.NoError(t, fb.Sync())
	// Written after the write-back: not on the device.
	_, err = fa.WriteAt(page('4'), 0)
	require.NoError(t, err)

	clock.Crash()
	got, err := vfs.ReadFile(a.Crash(), "a")
	require.NoError(t, err)
	assert.Equal(t, page('2'), got, "page 0 as written back, page 1 lost with the size")
	got, err = vfs.ReadFile(b.Crash(), "b")
	require.NoError(t, err)
	assert.Equal(t, "b", string(got))
}

// TestMemSharedFlushAfterCrash: a flush that the clock stopped does not
// make written-back bytes durable, and says so.
func TestMemSharedFlushAfterCrash(t *testing.T) {
	clock := vfs.NewCrashClock()
	a := vfs.NewMem(vfs.WithCrashClock(clock))
	f, err := a.OpenFile("a", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	require.NoError(t, a.SyncDir("."))
	_, err = f.WriteAt([]byte("old"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("new"), 0)
	require.NoError(t, err)
	require.NoError(t, f.(vfs.SharedFlush).WriteBack())
	clock.CrashAfter(0)
	assert.ErrorIs(t, f.Sync(), vfs.ErrCrashed)
	got, err := vfs.ReadFile(a.Crash(), "a")
	require.NoError(t, err)
	assert.Equal(t, "old", string(got))
}

// TestOSSharedFlush: on the host, the calls work and Allocated sees holes.
func TestOSSharedFlush(t *testing.T) {
	fsys := vfs.NewOS(t.TempDir())
	f, err := fsys.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer f.Close()
	sf, ok := f.(vfs.SharedFlush)
	require.True(t, ok)
	_, inPlace := sf.Disk()
	t.Logf("in place: %v", inPlace)
	_, err = f.WriteAt(bytes.Repeat([]byte{1}, 4096), 1<<20)
	require.NoError(t, err)
	require.NoError(t, sf.WriteBack())
	require.NoError(t, f.Sync())
	var ranges [][2]int64
	require.NoError(t, sf.Allocated(func(off, n int64) { ranges = append(ranges, [2]int64{off, n}) }))
	require.NotEmpty(t, ranges)
	// A file system may allocate more than was written, never less, and
	// the hole before it stays a hole where the file system has holes.
	last := ranges[len(ranges)-1]
	assert.LessOrEqual(t, last[0], int64(1<<20))
	assert.GreaterOrEqual(t, last[0]+last[1], int64(1<<20+4096))
}

// TestPunch: on MemFS and on the host, a punched range reads as zeros and
// is no longer allocated; the bytes around it are kept. On MemFS a crash
// before the next Sync leaves what was synced.
func TestPunch(t *testing.T) {
	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, 4096) }
	for name, fsys := range map[string]vfs.FS{"mem": vfs.NewMem(), "os": vfs.NewOS(t.TempDir())} {
		t.Run(name, func(t *testing.T) {
			f, err := fsys.OpenFile("f", os.O_RDWR|os.O_CREATE)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAtv([][]byte{page('a'), page('b'), page('c')}, 0)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.(vfs.Puncher).Punch(4096, 4096))
			got := make([]byte, 3*4096)
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			assert.Equal(t, bytes.Join([][]byte{page('a'), make([]byte, 4096), page('c')}, nil), got)
			st, err := f.Stat()
			require.NoError(t, err)
			assert.EqualValues(t, 3*4096, st.Size(), "the size is kept")
			var ranges [][2]int64
			require.NoError(t, f.(vfs.SharedFlush).Allocated(func(off, n int64) { ranges = append(ranges, [2]int64{off, n}) }))
			for _, r := range ranges {
				assert.False(t, r[0] < 2*4096 && r[0]+r[1] > 4096, "punched page still allocated: %v", ranges)
			}
		})
	}
	m := vfs.NewMem()
	f, err := m.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("."))
	_, err = f.WriteAt(page('a'), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.(vfs.Puncher).Punch(0, 4096))
	got, err := vfs.ReadFile(m.Crash(), "f")
	require.NoError(t, err)
	assert.Equal(t, page('a'), got, "a punch is durable only after a Sync")
}
