// Package storetest makes small erasure-coded stores, damages their shard
// files on disk and checks what reads back. The scrub and repair tests
// use it twice: in-process through the CLI (cmd/target) and through the
// built bin/target (integration).
//
// A store is chunkstore's default 4+2 geometry with a 4 KiB stripe unit:
// a stripe holds 16 KiB of data and a slot is 8 KiB on each device (a
// 4 KiB header region, then the unit). It holds one fully written volume,
// "vol", and one chunk of three stripes, every stripe full, in slots
// 0 … Stripes-1.
package storetest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
)

const (
	Unit         = 4096                      // the stripe unit
	Slot         = headerRegion + Unit       // a slot on one device: header region, then payload
	StripeData   = 4 * Unit                  // data bytes per stripe (4 data shards)
	ChunkStripes = 3                         // the chunk's stripes
	ChunkSize    = ChunkStripes * StripeData // the chunk's bytes
	headerRegion = 4096                      // a slot's header region on each device
	headerCRC    = 64                        // the header bytes before the sector checksums
)

// Store is what Make wrote.
type Store struct {
	Dirs      []string // the device directories, in device order
	Vol       []byte   // the volume's bytes
	Chunk     chunkstore.ChunkID
	ChunkData []byte
	Stripes   int // slots in use: the volume's stripes, then the chunk's
}

// Make creates a store of volSize bytes of volume on data's default device
// directories, through the library, with contents drawn from seed.
func Make(t testing.TB, data string, volSize int, seed uint64) *Store {
	t.Helper()
	require.Zero(t, volSize%StripeData, "the volume is whole stripes")
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	s, err := chunkstore.CreateDirs(dirs, chunkstore.WithStripeUnit(Unit))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(seed, seed))
	st := &Store{
		Dirs:      dirs,
		Vol:       RandBytes(r, volSize),
		Chunk:     chunkstore.NewChunkID(),
		ChunkData: RandBytes(r, ChunkSize),
		Stripes:   volSize/StripeData + ChunkStripes,
	}
	v, err := s.CreateVolume("vol", int64(volSize))
	require.NoError(t, err)
	_, err = v.WriteAt(st.Vol, 0)
	require.NoError(t, err)
	require.NoError(t, s.PutChunk(st.Chunk, st.ChunkData, 0))
	require.NoError(t, s.Sync())
	in := s.Info()
	require.EqualValues(t, st.Stripes, in.SlotsInUse)
	require.Equal(t, in.SlotsInUse, in.Slots, "every slot handed out is in use, so every slot below it is live")
	require.NoError(t, s.Close())
	return st
}

// Verify opens the store on dirs (st.Dirs, or with a device replaced) and
// requires every byte to read back as written; it returns the store's
// stats after the reads.
func (st *Store) Verify(t testing.TB, dirs []string) chunkstore.Stats {
	t.Helper()
	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, len(st.Vol))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(st.Vol, got), "the volume reads back as written")
	chunk, err := s.GetChunk(st.Chunk)
	require.NoError(t, err)
	require.True(t, bytes.Equal(st.ChunkData, chunk), "the chunk reads back as written")
	return s.Stats()
}

// FlipPayload flips 1 to 3 random payload bytes of the shard that device
// directory devDir holds in slot.
func FlipPayload(t testing.TB, r *rand.Rand, devDir string, slot int) {
	t.Helper()
	flip(t, r, devDir, payloadOffsets(r, slot, Unit))
}

// FlipShard damages the shard that devDir holds in slot: 1 to 3 payload
// bytes (three times in four), or one byte of the checksummed header.
func FlipShard(t testing.TB, r *rand.Rand, devDir string, slot int) {
	t.Helper()
	FlipShardUnit(t, r, devDir, slot, Unit)
}

// FlipShardUnit is FlipShard for a store of any stripe unit, such as the
// namespaces `target serve` makes (chunkstore.DefaultStripeUnit).
func FlipShardUnit(t testing.TB, r *rand.Rand, devDir string, slot, unit int) {
	t.Helper()
	if r.IntN(4) != 0 {
		flip(t, r, devDir, payloadOffsets(r, slot, unit))
		return
	}
	flip(t, r, devDir, []int64{int64(slot*(headerRegion+unit) + r.IntN(headerCRC))})
}

// payloadOffsets picks 1 to 3 random payload offsets of slot.
func payloadOffsets(r *rand.Rand, slot, unit int) []int64 {
	offs := make([]int64, 1+r.IntN(3))
	for i := range offs {
		offs[i] = int64(slot*(headerRegion+unit) + headerRegion + r.IntN(unit))
	}
	return offs
}

func flip(t testing.TB, r *rand.Rand, devDir string, offs []int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(devDir, "shards"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	for _, off := range offs {
		b := []byte{0}
		_, err := f.ReadAt(b, off)
		require.NoError(t, err)
		b[0] ^= byte(1 + r.IntN(255))
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
	}
}

// RandBytes returns n bytes drawn from r.
func RandBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Summary parses the key=value fields of the summary line `scrub` and
// `repair` print last on stdout, which must begin with prefix ("scrub:",
// "repair:"). true and false read as 1 and 0.
func Summary(t testing.TB, stdout, prefix string) map[string]int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, prefix), "the last stdout line is the summary:\n%s", stdout)
	m := map[string]int64{}
	for _, f := range strings.Fields(strings.TrimPrefix(last, prefix)) {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "field %q of %q", f, last)
		switch v {
		case "true":
			m[k] = 1
		case "false":
			m[k] = 0
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "field %q of %q", f, last)
			m[k] = n
		}
	}
	return m
}
