package chunkstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

func TestParseGeometry(t *testing.T) {
	good := map[string]Geometry{"4+2": {4, 2}, "1+0": {1, 0}, " 10+4 ": {10, 4}, "1+63": {1, 63}}
	for in, want := range good {
		g, err := ParseGeometry(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, g)
		assert.Equal(t, want.String(), g.String())
	}
	bad := map[string]string{
		"":      "want K+M",
		"4":     "want K+M",
		"4-2":   "want K+M",
		"x+2":   "is not a whole number",
		"4+y":   "is not a whole number",
		"+4+2":  "is not a whole number",
		"4+-2":  "is not a whole number",
		"0+2":   "at least one data shard",
		"40+30": "at most 64 devices",
	}
	for in, msg := range bad {
		_, err := ParseGeometry(in)
		require.Error(t, err, in)
		assert.ErrorIs(t, err, ErrInvalidGeometry, in)
		assert.Contains(t, err.Error(), msg, in)
	}
}

func TestOptionsValidate(t *testing.T) {
	td := newTestDevices(t, 6)
	for _, o := range []Option{WithStripeUnit(1000), WithStripeUnit(2 << 20), WithOverProvision(-1), WithGeometry(Geometry{0, 1})} {
		_, err := Create(td.fs(), o)
		assert.Error(t, err)
	}
	_, err := Create(td.fs()[:5])
	assert.ErrorIs(t, err, ErrInvalidArgument, "4+2 needs six devices")
}

func TestDeviceIdentity(t *testing.T) {
	g := DefaultGeometry
	opts := testOpts(g, 4096)
	newStore := func(t *testing.T) *testDevices {
		td := newTestDevices(t, g.Devices())
		s := mustCreate(t, td, opts...)
		require.NoError(t, s.Close())
		return td
	}

	t.Run("Swapped", func(t *testing.T) {
		td := newStore(t)
		fss := td.fs()
		fss[1], fss[4] = fss[4], fss[1]
		_, err := Open(fss, opts...)
		require.ErrorIs(t, err, ErrDeviceSwapped)
		var de *DevicesError
		require.ErrorAs(t, err, &de)
		assert.Len(t, de.Devices, 2, "both misplaced devices are named")
		assert.Contains(t, err.Error(), "device 4 of this store, given as device 1")
	})

	t.Run("Foreign", func(t *testing.T) {
		td := newStore(t)
		other := newStore(t)
		fss := td.fs()
		fss[3] = other.fs()[3]
		_, err := Open(fss, opts...)
		require.ErrorIs(t, err, ErrForeignDevice)
		assert.True(t, IsDeviceProblem(err))
	})

	t.Run("MissingUpToM", func(t *testing.T) {
		td := newStore(t)
		fss := td.fs()
		fss[0] = vfs.NewOS(t.TempDir() + "/gone") // no such directory
		fss[5] = vfs.NewMem(vfs.WithHostDir(hostDir(t)))
		s, err := Open(fss, opts...)
		require.NoError(t, err)
		info := s.Info()
		assert.True(t, info.Degraded)
		assert.Equal(t, DeviceMissing, info.Devices[0].State)
		assert.ErrorIs(t, info.Devices[0].Err, ErrDeviceMissing)
		assert.ErrorIs(t, info.Devices[5].Err, ErrDeviceEmpty)
		assert.Equal(t, DeviceHealthy, info.Devices[1].State)
		require.NoError(t, s.Close())
	})

	t.Run("MissingMoreThanM", func(t *testing.T) {
		td := newStore(t)
		fss := td.fs()
		for i := range 3 {
			fss[i] = vfs.NewMem()
		}
		_, err := Open(fss, opts...)
		require.ErrorIs(t, err, ErrTooManyFailures)
		assert.True(t, IsUnavailable(err))
	})

	t.Run("CorruptIdentity", func(t *testing.T) {
		td := newStore(t)
		b, err := vfs.ReadFile(td.mem[2], identityFile)
		require.NoError(t, err)
		b[idOffPos] ^= 1
		require.NoError(t, vfs.WriteFile(td.mem[2], identityFile, b))
		s, err := Open(td.fs(), opts...)
		require.NoError(t, err, "a corrupt identity counts as one missing device")
		assert.True(t, IsCorruption(s.Info().Devices[2].Err))
		require.NoError(t, s.Close())
	})

	t.Run("GeometryMismatch", func(t *testing.T) {
		td := newStore(t)
		_, err := Open(td.fs(), WithGeometry(Geometry{3, 3}))
		require.ErrorIs(t, err, ErrGeometryMismatch)
		_, err = Open(td.fs(), WithStripeUnit(8192))
		require.ErrorIs(t, err, ErrGeometryMismatch)
		_, err = Open(td.fs()[:5])
		require.ErrorIs(t, err, ErrInvalidArgument)
	})

	t.Run("CreateOnExisting", func(t *testing.T) {
		td := newStore(t)
		_, err := Create(td.fs(), opts...)
		require.ErrorIs(t, err, ErrStoreExists)
	})

	t.Run("NoStore", func(t *testing.T) {
		td := newTestDevices(t, 6)
		_, err := Open(td.fs(), opts...)
		require.ErrorIs(t, err, ErrNoStore)
	})

	t.Run("GoldenMismatch", func(t *testing.T) {
		td := newStore(t)
		// A store whose recorded parity differs from what this build
		// computes: as if written by a coder with other matrix options.
		for _, m := range td.mem {
			b, err := vfs.ReadFile(m, identityFile)
			require.NoError(t, err)
			id, err := decodeIdentity(b)
			require.NoError(t, err)
			id.Golden[0] ^= 0xff
			require.NoError(t, vfs.WriteFile(m, identityFile, id.encode()))
		}
		_, err := Open(td.fs(), opts...)
		require.ErrorIs(t, err, ErrGoldenMismatch)
	})

	t.Run("Busy", func(t *testing.T) {
		td := newStore(t)
		s, err := Open(td.fs(), opts...)
		require.NoError(t, err)
		_, err = Open(td.fs(), opts...)
		require.ErrorIs(t, err, ErrDeviceBusy)
		require.NoError(t, s.Close())
	})
}

func TestStaleReplicaIsBroughtUpToDate(t *testing.T) {
	g := Geometry{2, 1}
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	// Device 2 cannot take metadata commits for a while: its replica
	// falls behind while the volume is created.
	remove := td.inj[2].Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpStat}, Path: identityFile})
	_, err := s.CreateVolume("late", 1<<20)
	require.NoError(t, err)
	require.Equal(t, DeviceFailed, s.Info().Devices[2].State)
	require.NoError(t, s.Close())
	remove()

	seqs := func() []uint64 {
		var out []uint64
		for _, m := range td.mem {
			db, err := openBolt(m)
			require.NoError(t, err)
			sb, err := readSuper(boltDB{db})
			require.NoError(t, err)
			require.NoError(t, db.Close())
			out = append(out, sb.Seq)
		}
		return out
	}
	before := seqs()
	assert.Less(t, before[2], before[0], "device 2's replica fell behind")

	s = mustOpen(t, td, opts...)
	assert.Len(t, s.Volumes(), 1)
	require.NoError(t, s.Close())
	after := seqs()
	assert.Equal(t, after[0], after[2], "Open brought device 2's replica up to date")
	assert.Equal(t, after[0], after[1])
}

func TestOpenOrCreateDirs(t *testing.T) {
	dirs := DeviceDirs(hostDir(t)+"/data", Geometry{2, 1})
	s, err := OpenOrCreateDirs(dirs, testOpts(Geometry{2, 1}, 4096)...)
	require.NoError(t, err, "directories that do not exist yet: created")
	require.NoError(t, s.Close())
	s, err = OpenOrCreateDirs(dirs)
	require.NoError(t, err)
	assert.Equal(t, Geometry{2, 1}, s.Info().Geometry)
	require.NoError(t, s.Close())
}

func TestOpenOrCreate(t *testing.T) {
	td := newTestDevices(t, 3)
	opts := testOpts(Geometry{2, 1}, 4096)
	s, err := OpenOrCreate(td.fs(), opts...)
	require.NoError(t, err, "empty devices: created")
	id := s.Info().ID
	require.NoError(t, s.Close())
	s, err = OpenOrCreate(td.fs(), opts...)
	require.NoError(t, err)
	assert.Equal(t, id, s.Info().ID, "existing store: opened")
	require.NoError(t, s.Close())
	// A store missing too many devices is refused, not reformatted.
	fss := td.fs()
	fss[0], fss[1] = vfs.NewMem(), vfs.NewMem()
	_, err = OpenOrCreate(fss, opts...)
	require.ErrorIs(t, err, ErrTooManyFailures)
}
