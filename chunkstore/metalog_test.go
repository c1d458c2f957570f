package chunkstore

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// dump returns every bucket's content, for comparing replicas.
func dump(t *testing.T, db metaDB) map[string]map[string]string {
	out := map[string]map[string]string{}
	require.NoError(t, db.view(func(tx kvTx) error {
		for _, n := range []string{"a", "b", "c"} {
			bk := tx.bucket([]byte(n))
			if bk == nil {
				continue
			}
			m := map[string]string{}
			out[n] = m
			if err := bk.forEach(func(k, v []byte) error { m[string(k)] = string(v); return nil }); err != nil {
				return err
			}
		}
		return nil
	}))
	return out
}

func put(t *testing.T, db metaDB, bucket string, kv ...string) {
	require.NoError(t, db.update(func(tx kvTx) error {
		bk, err := tx.createBucket([]byte(bucket))
		if err != nil {
			return err
		}
		for i := 0; i < len(kv); i += 2 {
			if err := bk.put([]byte(kv[i]), []byte(kv[i+1])); err != nil {
				return err
			}
		}
		return nil
	}))
}

func TestMetaLogReopen(t *testing.T) {
	mem := vfs.NewMem()
	db, err := openLog(mem)
	require.NoError(t, err)
	put(t, db, "a", "k1", "v1", "k2", "v2")
	put(t, db, "b", "x", "1")
	require.NoError(t, db.update(func(tx kvTx) error {
		if err := tx.bucket([]byte("a")).del([]byte("k1")); err != nil {
			return err
		}
		return tx.deleteBucket([]byte("b"))
	}))
	// A failed transaction leaves nothing behind.
	assert.Error(t, db.update(func(tx kvTx) error {
		bk, _ := tx.createBucket([]byte("c"))
		bk.put([]byte("no"), []byte("no"))
		tx.bucket([]byte("a")).del([]byte("k2"))
		return fmt.Errorf("give up")
	}))
	want := map[string]map[string]string{"a": {"k2": "v2"}}
	assert.Equal(t, want, dump(t, db))
	require.NoError(t, db.close())

	db2, err := openLog(mem)
	require.NoError(t, err)
	assert.Equal(t, want, dump(t, db2))
	require.NoError(t, db2.close())
}

// TestMetaLogCrash: a crash after any number of operations leaves every
// update that returned, and nothing of one that did not.
func TestMetaLogCrash(t *testing.T) {
	for after := int64(0); after < 60; after++ {
		clock := vfs.NewCrashClock()
		mem := vfs.NewMem(vfs.WithCrashClock(clock))
		clock.CrashAfter(after)
		want := map[string]map[string]string{}
		db, err := openLog(mem)
		if err == nil {
			for i := 0; i < 40; i++ {
				k, v := fmt.Sprint("k", i%7), fmt.Sprint("v", i)
				err = db.update(func(tx kvTx) error {
					bk, err := tx.createBucket([]byte("a"))
					if err != nil {
						return err
					}
					return bk.put([]byte(k), []byte(v))
				})
				if err != nil {
					break
				}
				if want["a"] == nil {
					want["a"] = map[string]string{}
				}
				want["a"][k] = v
			}
			db.close()
		}
		clock.Crash()
		after2 := mem.Crash()
		db, err = openLog(after2)
		if err != nil {
			// Only a crash before the first snapshot was durable.
			require.Empty(t, want, "after %d: %v", after, err)
			continue
		}
		got := dump(t, db)
		if len(want) == 0 {
			want = map[string]map[string]string{}
		}
		// An update returns once its frame is synced, and the clock
		// crashes at an operation: what returned is there, and nothing
		// else.
		require.Equal(t, want, got, "crash after %d operations", after)
		db.close()
	}
}

// TestMetaLogTornTail: a frame cut short ends the log, and is cut off
// before the next one is written.
func TestMetaLogTornTail(t *testing.T) {
	mem := vfs.NewMem()
	db, err := openLog(mem)
	require.NoError(t, err)
	put(t, db, "a", "k", "1")
	end := db.end
	put(t, db, "a", "k", "2", "long", string(make([]byte, 5000)))
	require.NoError(t, db.close())
	f, err := mem.OpenFile(metaLogFile, os.O_RDWR)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(end+100))
	require.NoError(t, f.Close())

	db, err = openLog(mem)
	require.NoError(t, err)
	assert.Equal(t, map[string]map[string]string{"a": {"k": "1"}}, dump(t, db))
	put(t, db, "a", "k", "3")
	require.NoError(t, db.close())
	db, err = openLog(mem)
	require.NoError(t, err)
	assert.Equal(t, map[string]map[string]string{"a": {"k": "3"}}, dump(t, db))
	require.NoError(t, db.close())

	// A bad first frame is a corrupt replica.
	f, err = mem.OpenFile(metaLogFile, os.O_RDWR)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff}, 13) // the snapshot's CRC
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = openLog(mem)
	assert.True(t, IsCorruption(err), "%v", err)
}

// TestMetaLogCompacts: the log is written again as a snapshot once it
// outgrows it, with the same content.
func TestMetaLogCompacts(t *testing.T) {
	mem := vfs.NewMem()
	db, err := openLog(mem)
	require.NoError(t, err)
	big := string(make([]byte, 8<<10))
	for i := range 400 {
		put(t, db, "a", fmt.Sprint("k", i%10), big+fmt.Sprint(i))
	}
	st, err := mem.Stat(metaLogFile)
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(2<<20), "never compacted")
	want := dump(t, db)
	require.NoError(t, db.close())
	db, err = openLog(mem)
	require.NoError(t, err)
	assert.Equal(t, want, dump(t, db))
	// Cursors: seek, next, delete under a prefix.
	require.NoError(t, db.update(func(tx kvTx) error { return dropPrefix(tx.bucket([]byte("a")), []byte("k1")) }))
	got := dump(t, db)["a"]
	assert.Len(t, got, 9)
	assert.NotContains(t, got, "k1")
	require.NoError(t, db.close())
}

// TestStoreOnMetaLog: a store whose devices have no host path keeps its
// metadata in meta.log, and opens again from it.
func TestStoreOnMetaLog(t *testing.T) {
	devs := make([]vfs.FS, 3)
	for i := range devs {
		devs[i] = vfs.NewMem() // no host directory: no HostPath
	}
	opts := testOpts(Geometry{2, 1}, 4096)
	s, err := Create(devs, opts...)
	require.NoError(t, err)
	v, err := s.CreateVolume("v", 1<<20)
	require.NoError(t, err)
	data := []byte("on a device with no host path")
	_, err = v.WriteAt(data, 8192)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, d := range devs {
		_, err := d.Stat(metaLogFile)
		require.NoError(t, err)
	}
	s, err = Open(devs, opts...)
	require.NoError(t, err)
	v, err = s.OpenVolume("v")
	require.NoError(t, err)
	got := make([]byte, len(data))
	_, err = v.ReadAt(got, 8192)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	requireClean(t, s)
	require.NoError(t, s.Close())
}
