package chunkstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// readSpace returns a space's records as a map.
func readSpace(t testing.TB, s *Store, space string) map[string]string {
	t.Helper()
	got := map[string]string{}
	var last string
	require.NoError(t, s.Records(space, func(k, v []byte) error {
		require.Greater(t, string(k), last, "records come in key order")
		last = string(k)
		got[string(k)] = string(v)
		return nil
	}))
	return got
}

// TestRecordWire pins a stored record: the value's bytes, then the
// CRC32C of the stored key followed by the value.
func TestRecordWire(t *testing.T) {
	key := recordKey("fs", []byte("k1"))
	require.Equal(t, hextest.Decode(t, `
		02           // space name length
		66 73        // "fs"
		6b 31        // the record's key, "k1"`), key)
	require.Equal(t, hextest.Decode(t, `
		76 61 6c     // the value, "val"
		c1 9c 3a 29  // CRC32C of the stored key and the value, little-endian`), encodeRecord(key, []byte("val")))
	v, err := decodeRecord(key, encodeRecord(key, []byte("val")))
	require.NoError(t, err)
	require.Equal(t, "val", string(v))
	bad := encodeRecord(key, []byte("val"))
	bad[0] ^= 1
	_, err = decodeRecord(key, bad)
	require.True(t, IsCorruption(err))
	_, err = decodeRecord(recordKey("fs", []byte("k2")), encodeRecord(key, []byte("val")))
	require.True(t, IsCorruption(err), "a record moved to another key does not verify")
}

func FuzzRecord(f *testing.F) {
	key := recordKey("fs", []byte("k"))
	f.Add(key, encodeRecord(key, []byte("value")))
	f.Add(key, encodeRecord(key, nil))
	f.Add([]byte{}, []byte{1, 2})
	f.Fuzz(func(t *testing.T, key, b []byte) {
		v, err := decodeRecord(key, b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeRecord(key, v))
	})
}

// TestRecords: staged records read back at once and survive a reopen
// after Sync; spaces are separate; a nil value deletes; bad arguments
// are refused.
func TestRecords(t *testing.T) {
	td := newTestDevices(t, 3)
	opts := testOpts(Geometry{Data: 2, Parity: 1}, 4096)
	s := mustCreate(t, td, opts...)
	require.Empty(t, readSpace(t, s, "a"))
	require.NoError(t, s.PutRecords("a", []Record{{Key: []byte("x"), Value: []byte("1")}, {Key: []byte("y"), Value: []byte{}}}))
	require.NoError(t, s.PutRecords("ab", []Record{{Key: []byte("x"), Value: []byte("other")}}))
	require.Equal(t, map[string]string{"x": "1", "y": ""}, readSpace(t, s, "a"))
	require.NoError(t, s.Sync())
	require.NoError(t, s.PutRecords("a", []Record{{Key: []byte("x")}, {Key: []byte("z"), Value: []byte("3")}}))
	require.Equal(t, map[string]string{"y": "", "z": "3"}, readSpace(t, s, "a"), "staged over committed")
	require.NoError(t, s.Sync())
	require.NoError(t, s.Close())

	s = mustOpen(t, td, opts...)
	defer s.Close()
	require.Equal(t, map[string]string{"y": "", "z": "3"}, readSpace(t, s, "a"))
	require.Equal(t, map[string]string{"x": "other"}, readSpace(t, s, "ab"))

	require.ErrorIs(t, s.PutRecords("", nil), ErrInvalidArgument)
	require.ErrorIs(t, s.PutRecords("a", []Record{{Value: []byte("no key")}}), ErrInvalidArgument)
	require.ErrorIs(t, s.PutRecords("a", []Record{{Key: make([]byte, MaxRecordKey+1)}}), ErrInvalidArgument)
	stop := errors.New("stop")
	require.ErrorIs(t, s.Records("a", func(k, v []byte) error { return stop }), stop)
}

// TestRecordsSurviveLostDevices: records synced on a 4+2 store read back
// after any two device directories are deleted, and the replicas written
// again at that Open carry them.
func TestRecordsSurviveLostDevices(t *testing.T) {
	g := DefaultGeometry
	for _, lost := range [][2]int{{0, 1}, {2, 5}, {4, 5}} {
		t.Run(fmt.Sprint(lost), func(t *testing.T) {
			dirs := DeviceDirs(filepath.Join(t.TempDir(), "d"), g)
			s, err := CreateDirs(dirs, WithGeometry(g), WithStripeUnit(4096))
			require.NoError(t, err)
			want := map[string]string{}
			var recs []Record
			for i := range 500 {
				k, v := fmt.Sprintf("key%04d", i), fmt.Sprintf("value %d", i*i)
				want[k] = v
				recs = append(recs, Record{Key: []byte(k), Value: []byte(v)})
			}
			require.NoError(t, s.PutRecords("fs", recs))
			require.NoError(t, s.Sync())
			require.NoError(t, s.Close())
			for _, i := range lost {
				require.NoError(t, os.RemoveAll(dirs[i]))
			}
			s, err = OpenDirs(dirs)
			require.NoError(t, err)
			require.Equal(t, want, readSpace(t, s, "fs"))
			require.NoError(t, s.Close())
		})
	}
}

// TestCrashRecords: PutRecords calls are atomic across a power loss, and
// none synced is lost: after a crash at a random point, the space is as
// it was after some call made at or after the last Sync that returned.
func TestCrashRecords(t *testing.T) {
	for seed := range seeds(20, 200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 0x4ec))
			td := newTestDevices(t, 3)
			opts := testOpts(Geometry{Data: 2, Parity: 1}, 4096)
			s := mustCreate(t, td, opts...)
			cur := map[string]string{}
			snap := func() string { return fmt.Sprint(cur) } // fmt sorts map keys
			states := []string{snap()}
			synced := 0 // index in states of the last synced state
			td.clock.CrashAfter(r.Int64N(300))
			var err error
			for i := 0; i < 200 && err == nil; i++ {
				if r.IntN(6) == 0 {
					if err = s.Sync(); err == nil {
						synced = len(states) - 1
					}
					continue
				}
				var recs []Record
				for range 1 + r.IntN(4) {
					k := fmt.Sprintf("k%d", r.IntN(12))
					if r.IntN(4) == 0 {
						recs = append(recs, Record{Key: []byte(k)})
					} else {
						recs = append(recs, Record{Key: []byte(k), Value: []byte(fmt.Sprint(i))})
					}
				}
				if err = s.PutRecords("sp", recs); err != nil {
					break
				}
				for _, rec := range recs {
					if rec.Value == nil {
						delete(cur, string(rec.Key))
					} else {
						cur[string(rec.Key)] = string(rec.Value)
					}
				}
				states = append(states, snap())
				if r.IntN(3) == 0 {
					// A background-style checkpoint with nothing else
					// waiting takes the records too.
					err = s.commit()
				}
			}
			t.Logf("workload ended: %v, %d states, the last synced %d", err, len(states), synced)
			_ = s.Close()
			td.crash()
			s = mustOpen(t, td, opts...)
			defer s.Close()
			got := map[string]string{}
			for k, v := range readSpace(t, s, "sp") {
				got[k] = v
			}
			g := fmt.Sprint(got)
			for _, st := range states[synced:] {
				if st == g {
					return
				}
			}
			t.Fatalf("after the crash the space is %s: not a state at or after the last sync (%s)", g, states[synced])
		})
	}
}
