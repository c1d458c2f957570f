package chunkstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// TestJournalRecordWire pins the journal record header's layout.
func TestJournalRecordWire(t *testing.T) {
	r := jrecord{
		Store:  uuid.UUID{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f},
		Pos:    3,
		Offset: 0x3000,
		Seq:    7,
		Gen:    0x0102,
		Slot:   9,
		Runs:   []sumRun{{Owner: 5, LBA: 0x20, N: 2}},
		CRCs:   []uint32{0xaabbccdd, 0x11223344},
	}
	b := make([]byte, SectorSize)
	n := r.marshalInto(b)
	require.Equal(t, jrecordSize(1, 2), n)
	want := strings.Join([]string{
		"4353 4a52",                         // magic "CSJR"
		"0200",                              // format version 2
		"0100",                              // runs: 1
		"1011121314151617 18191a1b1c1d1e1f", // store UUID
		"0300",                              // device position 3
		"0200",                              // data sectors: 2
		"00000000",                          // reserved
		"0030000000000000",                  // offset in the journal file 0x3000
		"0700000000000000",                  // record seq 7
		"0201000000000000",                  // generation 0x102
		"0900000000000000",                  // slot 9
		"0500000000000000 2000000000000000 02000000", // run: owner 5, sectors 0x20.., 2 of them
		"ddccbbaa 44332211",                          // the data sectors' CRC32C
	}, "")
	want = strings.ReplaceAll(want, " ", "")
	got := hex.EncodeToString(b[:n-4])
	assert.Equal(t, want, got)
	assert.Equal(t, checksum(b[:n-4]), le.Uint32(b[n-4:]), "CRC32C of what precedes it")

	back, err := decodeJRecord(b)
	require.NoError(t, err)
	assert.Equal(t, r, back)

	// Every field the decoder checks.
	for _, tc := range []struct {
		name string
		edit func(b []byte)
	}{
		{"magic", func(b []byte) { b[0] ^= 1 }},
		{"version", func(b []byte) { b[jrOffVersion] = 1 }},
		{"no runs", func(b []byte) { le.PutUint16(b[jrOffRuns:], 0) }},
		{"too many sectors", func(b []byte) { le.PutUint16(b[jrOffSectors:], 2000) }},
		{"reserved", func(b []byte) { b[jrOffReserved] = 1 }},
		{"runs and sectors disagree", func(b []byte) { le.PutUint32(b[jrOffRunList+16:], 1) }},
	} {
		c := bytes.Clone(b)
		tc.edit(c)
		// Refresh the CRC so that the field itself is what fails.
		if tc.name != "magic" {
			size := jrecordSize(int(le.Uint16(c[jrOffRuns:])), int(le.Uint16(c[jrOffSectors:])))
			if size <= SectorSize {
				le.PutUint32(c[size-4:], checksum(c[:size-4]))
			}
		}
		_, err := decodeJRecord(c)
		assert.Error(t, err, tc.name)
	}
	c := bytes.Clone(b)
	c[jrOffSeq] ^= 1
	_, err = decodeJRecord(c)
	assert.Error(t, err, "a changed byte fails the CRC")
}

func FuzzJournalRecord(f *testing.F) {
	b := make([]byte, SectorSize)
	(&jrecord{Seq: 1, Gen: 2, Runs: []sumRun{{Owner: 1, LBA: 2, N: 1}}, CRCs: []uint32{3}}).marshalInto(b)
	f.Add(b)
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeJRecord(b)
		if err != nil {
			return
		}
		out := make([]byte, SectorSize)
		n := r.marshalInto(out)
		require.Equal(t, b[:n], out[:n])
	})
}

// TestJRing: records wrap at the end, never overwrite a live one, and
// free their space when their generation is dead.
func TestJRing(t *testing.T) {
	r := jring{size: 10 * SectorSize}
	place := func(n int, gen uint64) (int64, bool) {
		off, ok := r.place(int64(n * SectorSize))
		if ok {
			r.push(off, int64(n*SectorSize), gen)
		}
		return off / SectorSize, ok
	}
	off, ok := place(4, 1)
	require.True(t, ok)
	assert.Zero(t, off)
	off, ok = place(4, 2)
	require.True(t, ok)
	assert.EqualValues(t, 4, off)
	_, ok = place(3, 2)
	assert.False(t, ok, "2 free at the end, none at the start")
	r.drop(2)
	off, ok = place(3, 3)
	require.True(t, ok)
	assert.Zero(t, off, "wraps into the space gen 1 left")
	_, ok = place(2, 3)
	assert.False(t, ok, "wrapped: only [3, 4) free")
	off, ok = place(1, 3)
	require.True(t, ok)
	assert.EqualValues(t, 3, off)
	r.drop(4)
	assert.Empty(t, r.live)
	off, ok = place(10, 4)
	require.True(t, ok, "an empty ring takes a record as large as itself")
	assert.Zero(t, off)
	_, ok = r.place(11 * SectorSize)
	assert.False(t, ok)
}

// TestJournalFUA: one-sector FUA writes go to the journal, not to short
// stripes, and survive a crash from the journal alone.
func TestJournalFUA(t *testing.T) {
	for _, g := range []Geometry{{4, 2}, {1, 0}, {2, 1}} {
		t.Run(g.String(), func(t *testing.T) {
			td := newTestDevices(t, g.Devices())
			td.direct = true
			opts := testOpts(g, 4096)
			s := mustCreate(t, td, opts...)
			v, err := s.CreateVolume("v", 1<<20)
			require.NoError(t, err)
			st0 := s.Stats()
			r := rand.New(rand.NewPCG(1, 2))
			want := make([]byte, 1<<20)
			// Fewer writes than a stripe holds: it stays open.
			n := g.Data*4096/SectorSize - 1
			for i := range n {
				p := randBytes(r, SectorSize)
				off := int64(i*7%256) * SectorSize
				_, err := v.WriteAtFlags(p, off, FUA)
				require.NoError(t, err)
				copy(want[off:], p)
			}
			st := s.Stats()
			assert.EqualValues(t, n, st.JournalRecords-st0.JournalRecords, "one record per FUA write")
			assert.Equal(t, st0.StripesWritten, st.StripesWritten, "no stripe written")
			assert.EqualValues(t, int64(n)*int64(g.Parity+1)*2*SectorSize, st.JournalBytes-st0.JournalBytes,
				"M+1 copies of a header and a sector each")
			s = crashAndRead(t, td, s, opts, 0, want) // the journal's sectors are back
			requireClean(t, s)
			// They are in stripes now: a second crash needs no journal.
			s = crashAndRead(t, td, s, opts, 0, want)
			require.NoError(t, s.Close())
		})
	}
}

// TestJournalStripeFills: a FUA load fills the open stripe through the
// journal and writes it whole, and the records of a stripe written and
// synced free their space, so a small journal never fills.
func TestJournalStripeFills(t *testing.T) {
	g := Geometry{4, 2}
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096, WithJournalSize(64<<10))
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("v", 4<<20)
	require.NoError(t, err)
	st0 := s.Stats()
	r := rand.New(rand.NewPCG(3, 4))
	want := make([]byte, 4<<20)
	const writes = 200
	for i := range writes {
		p := randBytes(r, SectorSize)
		off := int64(i*37%1024) * SectorSize
		_, err := v.WriteAtFlags(p, off, FUA)
		require.NoError(t, err)
		copy(want[off:], p)
	}
	st := s.Stats()
	// Every fourth write fills the stripe, which is then written whole
	// before its flush: that flush has nothing to journal.
	assert.EqualValues(t, writes*3/4, st.JournalRecords-st0.JournalRecords, "the others journaled: a 64 KiB journal keeps up")
	assert.EqualValues(t, writes/4, st.StripesWritten-st0.StripesWritten, "full stripes of 4 sectors, and no short one")
	s = crashAndRead(t, td, s, opts, 0, want)
	requireClean(t, s)
	require.NoError(t, s.Close())
}

// TestJournalFull: overwriting one sector of the open stripe with FUA
// again and again adds records of one generation until the journal
// has no room; the flush then seals a short stripe, which frees it.
func TestJournalFull(t *testing.T) {
	g := Geometry{2, 1}
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 64<<10, WithJournalSize(64<<10))
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("v", 1<<20)
	require.NoError(t, err)
	st0 := s.Stats()
	r := rand.New(rand.NewPCG(5, 6))
	var last []byte
	for range 40 {
		last = randBytes(r, SectorSize)
		_, err := v.WriteAtFlags(last, 0, FUA)
		require.NoError(t, err)
	}
	st := s.Stats()
	assert.Less(t, st.JournalRecords-st0.JournalRecords, int64(40), "some flushes sealed instead")
	assert.Greater(t, st.StripesWritten-st0.StripesWritten, int64(0))
	s = crashAndRead(t, td, s, opts, 0, last)
	require.NoError(t, s.Close())
}

// TestJournalOff: a store opened without a journal still applies the
// records a crash left in it, and then flushes with short stripes.
func TestJournalOff(t *testing.T) {
	g := Geometry{4, 2}
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 4096)...)
	v, err := s.CreateVolume("v", 1<<20)
	require.NoError(t, err)
	p := randBytes(rand.New(rand.NewPCG(7, 8)), SectorSize)
	_, err = v.WriteAtFlags(p, 8*SectorSize, FUA)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Stats().JournalRecords)
	s = crashAndRead(t, td, s, testOpts(g, 4096, WithJournalSize(0)), 8*SectorSize, p)
	v, err = s.OpenVolume("v")
	require.NoError(t, err)
	_, err = v.WriteAtFlags(p, 0, FUA)
	require.NoError(t, err)
	st := s.Stats()
	assert.Zero(t, st.JournalRecords)
	assert.Positive(t, st.StripesWritten)
	require.NoError(t, s.Close())
}

// TestJournalDegraded: with M devices gone, FUA writes still journal,
// to as many devices as the store can still lose plus one, and survive
// a crash.
func TestJournalDegraded(t *testing.T) {
	g := Geometry{4, 2}
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("v", 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	td.mem[1].Vanish()
	td.mem[4].Vanish()
	s = mustOpen(t, td, opts...)
	v, err = s.OpenVolume("v")
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(9, 10))
	want := make([]byte, 8*SectorSize)
	for i := range 3 {
		p := randBytes(r, SectorSize)
		_, err := v.WriteAtFlags(p, int64(i)*SectorSize, FUA)
		require.NoError(t, err)
		copy(want[i*SectorSize:], p)
	}
	st := s.Stats()
	assert.EqualValues(t, 3, st.JournalRecords)
	assert.EqualValues(t, 3*2*SectorSize, st.JournalBytes, "one copy each: with four devices left the store can lose none")
	s = crashAndRead(t, td, s, opts, 0, want)
	require.NoError(t, s.Close())
}

// crashAndRead crashes every device under s, reopens the store with opts
// and checks that volume "v" reads want at off. It returns the reopened
// store.
func crashAndRead(t *testing.T, td *testDevices, s *Store, opts []Option, off int64, want []byte) *Store {
	t.Helper()
	td.clock.Crash()
	_ = s.Close()
	td.crash()
	s = mustOpen(t, td, opts...)
	v, err := s.OpenVolume("v")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, off)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "volume v at %d after the crash", off)
	return s
}

// TestCrashJournal crashes a FUA load at a random operation: two writers
// making small FUA writes, some to the same blocks again and again, into
// a 64 KiB journal that wraps and fills (so that flushes also seal), on
// devices that share cache flushes or not. After the reopen every FUA
// write that returned reads back.
func TestCrashJournal(t *testing.T) {
	for seed := range seeds(40, 400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 0x10a))
			g := []Geometry{{4, 2}, {2, 1}, {1, 0}, {3, 2}}[seed%4]
			td := newTestDevices(t, g.Devices())
			td.direct = seed%2 == 0
			opts := testOpts(g, 4096*(1+r.IntN(2)), WithJournalSize(64<<10), WithAutoCommit([]int{0, 16}[r.IntN(2)]))
			s := mustCreate(t, td, opts...)
			fv, err := s.CreateVolume("fua", int64(fuaBlocks*crashBlock))
			require.NoError(t, err)
			fm := newBlockModel(fuaBlocks)
			td.clock.CrashAfter(r.Int64N(1500))
			done := startFUAWriters(uint64(seed), fv, fm)
			// A third writer hammers one block that the two leave alone
			// (the first writer's blocks end before half-1): its sector
			// stays in the open stripe and is journaled again at every
			// write.
			const b = fuaBlocks/2 - 1
			var hammer error
			for i := range 60 {
				ver := uint32(3)<<24 | uint32(i+1)
				if _, err := fv.WriteAtFlags(blockContent(ver, b), b*crashBlock, FUA); err != nil {
					fm.write(b, 1, ver)
					hammer = err
					break
				}
				fm.fua(b, 1, ver)
			}
			st := s.Stats()
			t.Logf("journal records %d, stripes %d, crashed %v", st.JournalRecords, st.StripesWritten, hammer)
			for _, err := range append(done(), hammer) {
				require.True(t, err == nil || errors.Is(err, vfs.ErrCrashed) || errors.Is(err, ErrTooManyFailures), "writer failed for another reason: %v", err)
			}
			td.clock.Crash()
			_ = s.Close()
			td.crash()

			s = mustOpen(t, td, opts...)
			fv, err = s.OpenVolume("fua")
			require.NoError(t, err)
			fm.check(t, fv)
			requireClean(t, s)
			require.NoError(t, s.Close())
		})
	}
}
