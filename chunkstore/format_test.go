package chunkstore

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// unhex decodes field-annotated hex.
var unhex = hextest.Decode

func TestShardHeaderLayout(t *testing.T) {
	h := shardHeader{
		Store: uuid.MustParse("00112233-4455-6677-8899-aabbccddeeff"),
		Owner: 5, Index: 7, Slot: 9, Gen: 0x0102030405060708,
		Shard: 4, Geo: Geometry{4, 2}, Length: 4096 + 100,
		CRCs: []uint32{0xdeadbeef, 0x01020304},
	}
	buf := make([]byte, shardHeaderSize(h.Length))
	require.Equal(t, 76, h.marshalInto(buf))
	want := unhex(t, `
		43534844                         // magic "CSHD", little-endian
		0200                             // version 2
		0200                             // two sector checksums
		00112233445566778899aabbccddeeff // store UUID
		0500000000000000                 // owner 5
		0700000000000000                 // stripe index 7
		0900000000000000                 // slot 9
		0807060504030201                 // generation
		0400                             // shard 4
		04 02                            // K=4, M=2
		64100000                         // payload length 4196
		efbeadde 04030201                // sector CRC32Cs
	`)
	require.Equal(t, want, buf[:len(want)])
	got, err := decodeShardHeader(buf, nil)
	require.NoError(t, err)
	h.Version = formatVersion
	assert.Equal(t, h, got)

	// Every single-byte change is caught.
	for i := range buf {
		bad := bytes.Clone(buf)
		bad[i] ^= 0x40
		_, err := decodeShardHeader(bad, nil)
		assert.True(t, IsCorruption(err), "byte %d", i)
	}
	_, err = decodeShardHeader(buf[:len(buf)-1], nil)
	assert.True(t, IsCorruption(err), "cut short")
}

func TestIdentityLayout(t *testing.T) {
	id := identity{
		Device:  uuid.MustParse("10000000-0000-0000-0000-000000000001"),
		Store:   uuid.MustParse("20000000-0000-0000-0000-000000000002"),
		Pos:     3,
		Geo:     Geometry{4, 2},
		Unit:    65536,
		Created: 1,
	}
	b := id.encode()
	require.Len(t, b, identitySize)
	want := unhex(t, `
		43534944                         // magic "CSID"
		0200 8000                        // version 2, 128 bytes
		10000000000000000000000000000001 // device UUID
		20000000000000000000000000000002 // store UUID
		0300                             // position 3
		04 02                            // K=4, M=2
		00000100                         // stripe unit 65536
		00100000                         // sector size 4096
		0100000000000000                 // created
	`)
	require.Equal(t, want, b[:len(want)])
	got, err := decodeIdentity(b)
	require.NoError(t, err)
	assert.Equal(t, id, got)
	// A version 1 identity names a store this build reads only to migrate.
	v1 := bytes.Clone(b)
	v1[idOffVersion] = formatV1
	le.PutUint32(v1[idOffCRC:], checksum(v1[:idOffCRC]))
	_, err = decodeIdentity(v1)
	assert.ErrorIs(t, err, ErrFormatV1)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 1
		_, err := decodeIdentity(bad)
		assert.True(t, IsCorruption(err), "byte %d", i)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	e := extent{Slot: 1, Gen: 2, Missing: 1 << 5, ShardLen: 4096}
	got, err := decodeExtent(e.encode())
	require.NoError(t, err)
	assert.Equal(t, e, got)

	sb := superblock{Version: formatVersion, Store: uuid.New(), Geo: Geometry{6, 3}, Unit: 8192, Seq: 9, GenHigh: 1 << 41, NextOwner: 12, LogGen: 1 << 40}
	gsb, err := decodeSuperblock(sb.encode())
	require.NoError(t, err)
	assert.Equal(t, sb, gsb)

	dr := deviceRecord{Device: uuid.New(), State: recRebuilding, StartGen: 4, Cursor: stripeKey{3, 4}}
	gdr, err := decodeDeviceRecord(dr.encode())
	require.NoError(t, err)
	assert.Equal(t, dr, gdr)

	vr := volumeRecord{Owner: 3, Size: 1 << 30, Created: 77}
	gvr, err := decodeVolumeRecord(vr.encode())
	require.NoError(t, err)
	assert.Equal(t, vr, gvr)

	cr := chunkRecord{Owner: 4, Length: 70000, Stripes: []extent{e, {Slot: 9, Gen: 10, ShardLen: 64}}}
	gcr, err := decodeChunkRecord(cr.encode())
	require.NoError(t, err)
	assert.Equal(t, cr, gcr)

	k := stripeKey{Owner: 1 << 40, Index: 3}
	gk, err := decodeStripeKey(k.encode())
	require.NoError(t, err)
	assert.Equal(t, k, gk)
	assert.True(t, stripeKey{1, 9}.less(stripeKey{2, 0}))
	assert.Less(t, string(stripeKey{1, 9}.encode()), string(stripeKey{2, 0}.encode()), "keys sort as bbolt orders them")
}

// Fuzz targets: every decoder of on-disk bytes. Property: whatever
// decodes re-encodes to the same bytes (one encoding per record), and
// nothing panics.

func FuzzIdentity(f *testing.F) {
	f.Add((&identity{Device: uuid.New(), Store: uuid.New(), Pos: 1, Geo: Geometry{4, 2}, Unit: 65536}).encode())
	f.Add(make([]byte, identitySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeIdentity(b)
		if err != nil {
			return
		}
		require.Equal(t, b, id.encode())
	})
}

func FuzzShardHeader(f *testing.F) {
	h := shardHeader{Store: uuid.New(), Owner: 1, Index: 2, Slot: 3, Gen: 4, Shard: 1, Geo: Geometry{2, 1}, Length: 5000, CRCs: []uint32{1, 2}}
	buf := make([]byte, shardHeaderSize(h.Length))
	h.marshalInto(buf)
	f.Add(buf)
	f.Add(buf[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeShardHeader(b, nil)
		if err != nil {
			return
		}
		out := make([]byte, shardHeaderSize(h.Length))
		n := h.marshalInto(out)
		require.Equal(t, b[:n], out)
	})
}

func FuzzSuperblock(f *testing.F) {
	f.Add((&superblock{Store: uuid.New(), Geo: Geometry{4, 2}, Unit: 65536, Seq: 1}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := decodeSuperblock(b)
		if err != nil || sb.Version == formatV1 {
			return // a version 1 superblock is read only to migrate it
		}
		require.Equal(t, b, sb.encode())
	})
}

func FuzzDeviceRecord(f *testing.F) {
	f.Add((&deviceRecord{Device: uuid.New(), State: recHealthy}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeDeviceRecord(b)
		if err != nil {
			return
		}
		require.Equal(t, b, r.encode())
	})
}

func FuzzVolumeRecord(f *testing.F) {
	f.Add((&volumeRecord{Owner: 1, Size: 4096}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeVolumeRecord(b)
		if err != nil {
			return
		}
		require.Equal(t, b, r.encode())
	})
}

func FuzzExtent(f *testing.F) {
	f.Add((&extent{Slot: 1, Gen: 2, ShardLen: 4096}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeExtent(b)
		if err != nil {
			return
		}
		require.Equal(t, b, e.encode())
	})
}

func FuzzChunkRecord(f *testing.F) {
	f.Add((&chunkRecord{Owner: 1, Length: 10, Stripes: []extent{{Slot: 1, Gen: 1, ShardLen: 64}}}).encode())
	f.Add((&chunkRecord{Owner: 1}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeChunkRecord(b)
		if err != nil {
			return
		}
		require.Equal(t, b, r.encode())
	})
}

func FuzzStripeKey(f *testing.F) {
	f.Add(stripeKey{Owner: 1, Index: 2}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeStripeKey(b)
		if err != nil {
			return
		}
		require.Equal(t, b, k.encode())
	})
}
