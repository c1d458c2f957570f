package chunkstore

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The metadata database: one bbolt file per device, all holding the same
// content. Buckets:
//
//	store    "super" → superblock (Seq orders the replicas)
//	devices  u16 position → deviceRecord
//	volumes  name → volumeRecord
//	map      stripeKey (owner, index) → extent, for volume stripes
//	chunks   ChunkID → chunkRecord (with its stripes' extents)
var (
	bucketStore   = []byte("store")
	bucketDevices = []byte("devices")
	bucketVolumes = []byte("volumes")
	bucketMap     = []byte("map")
	bucketChunks  = []byte("chunks")
	keySuper      = []byte("super")
	allBuckets    = [][]byte{bucketStore, bucketDevices, bucketVolumes, bucketMap, bucketChunks}
)

const boltLockTimeout = time.Second

var errBoltTimeout = berrors.ErrTimeout

// batch is the content of one commit, applied identically to every
// replica in one bbolt transaction each.
type batch struct {
	super   superblock
	devices map[int]deviceRecord
	volumes map[string]*volumeRecord // nil value: delete
	extents []extentChange
	// dropOwners deletes every map entry of these owners (deleted
	// volumes), after extents are applied.
	dropOwners []uint64
	chunks     map[ChunkID]*chunkRecord // nil value: delete
}

type extentChange struct {
	key stripeKey
	ext *extent // nil: delete (unmapped)
}

func newBatch() *batch {
	return &batch{devices: map[int]deviceRecord{}, volumes: map[string]*volumeRecord{}, chunks: map[ChunkID]*chunkRecord{}}
}

// markMissing records that the devices in mask hold no durable shard of
// any stripe this batch writes.
func (b *batch) markMissing(mask uint64) {
	for i := range b.extents {
		if e := b.extents[i].ext; e != nil {
			c := *e
			c.Missing |= mask
			b.extents[i].ext = &c
		}
	}
	for id, r := range b.chunks {
		if r == nil {
			continue
		}
		c := *r
		c.Stripes = append([]extent(nil), r.Stripes...)
		for i := range c.Stripes {
			c.Stripes[i].Missing |= mask
		}
		b.chunks[id] = &c
	}
}

func posKey(pos int) []byte {
	var k [2]byte
	binary.BigEndian.PutUint16(k[:], uint16(pos))
	return k[:]
}

func createBuckets(tx *bolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// apply writes b into a replica.
func (b *batch) apply(tx *bolt.Tx) error {
	if err := createBuckets(tx); err != nil {
		return err
	}
	if err := tx.Bucket(bucketStore).Put(keySuper, b.super.encode()); err != nil {
		return err
	}
	devs := tx.Bucket(bucketDevices)
	for pos, r := range b.devices {
		if err := devs.Put(posKey(pos), r.encode()); err != nil {
			return err
		}
	}
	vols := tx.Bucket(bucketVolumes)
	for name, r := range b.volumes {
		var err error
		if r == nil {
			err = vols.Delete([]byte(name))
		} else {
			err = vols.Put([]byte(name), r.encode())
		}
		if err != nil {
			return err
		}
	}
	m := tx.Bucket(bucketMap)
	for _, c := range b.extents {
		var err error
		if c.ext == nil {
			err = m.Delete(c.key.encode())
		} else {
			err = m.Put(c.key.encode(), c.ext.encode())
		}
		if err != nil {
			return err
		}
	}
	for _, owner := range b.dropOwners {
		prefix := stripeKey{Owner: owner}.encode()[:8]
		cur := m.Cursor()
		for k, _ := cur.Seek(prefix); k != nil && string(k[:8]) == string(prefix); k, _ = cur.Next() {
			if err := cur.Delete(); err != nil {
				return err
			}
		}
	}
	chunks := tx.Bucket(bucketChunks)
	for id, r := range b.chunks {
		var err error
		if r == nil {
			err = chunks.Delete(id[:])
		} else {
			err = chunks.Put(id[:], r.encode())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readSuper returns a replica's superblock.
func readSuper(db *bolt.DB) (sb superblock, err error) {
	defer recoverBolt(&err)
	err = db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketStore)
		if bk == nil {
			return corruptf("metadata has no store bucket")
		}
		v := bk.Get(keySuper)
		if v == nil {
			return corruptf("metadata has no superblock")
		}
		var derr error
		sb, derr = decodeSuperblock(v)
		return derr
	})
	return sb, err
}

// recoverBolt turns a bbolt panic (it panics on some corrupt pages) into
// a corruption error, so one bad replica does not take the store down.
func recoverBolt(err *error) {
	if r := recover(); r != nil {
		*err = corruptf("metadata replica: %v", r)
	}
}

// metaState is everything a replica holds, decoded.
type metaState struct {
	super   superblock
	devices map[int]deviceRecord
	volumes map[string]volumeRecord
	extents map[uint64]map[uint64]extent // owner → index → extent
	chunks  map[ChunkID]chunkRecord
}

// loadMeta reads and validates every record of a replica.
func loadMeta(db *bolt.DB) (st *metaState, err error) {
	defer recoverBolt(&err)
	st = &metaState{
		devices: map[int]deviceRecord{},
		volumes: map[string]volumeRecord{},
		extents: map[uint64]map[uint64]extent{},
		chunks:  map[ChunkID]chunkRecord{},
	}
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				return corruptf("metadata has no %s bucket", name)
			}
		}
		v := tx.Bucket(bucketStore).Get(keySuper)
		if v == nil {
			return corruptf("metadata has no superblock")
		}
		var err error
		if st.super, err = decodeSuperblock(v); err != nil {
			return err
		}
		if err := tx.Bucket(bucketDevices).ForEach(func(k, v []byte) error {
			if len(k) != 2 {
				return corruptf("device key of %d bytes", len(k))
			}
			r, err := decodeDeviceRecord(v)
			if err != nil {
				return err
			}
			st.devices[int(binary.BigEndian.Uint16(k))] = r
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketVolumes).ForEach(func(k, v []byte) error {
			r, err := decodeVolumeRecord(v)
			if err != nil {
				return fmt.Errorf("volume %q: %w", k, err)
			}
			st.volumes[string(k)] = r
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMap).ForEach(func(k, v []byte) error {
			key, err := decodeStripeKey(k)
			if err != nil {
				return err
			}
			e, err := decodeExtent(v)
			if err != nil {
				return fmt.Errorf("stripe %d/%d: %w", key.Owner, key.Index, err)
			}
			m := st.extents[key.Owner]
			if m == nil {
				m = map[uint64]extent{}
				st.extents[key.Owner] = m
			}
			m[key.Index] = e
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketChunks).ForEach(func(k, v []byte) error {
			if len(k) != len(ChunkID{}) {
				return corruptf("chunk key of %d bytes", len(k))
			}
			r, err := decodeChunkRecord(v)
			if err != nil {
				return fmt.Errorf("chunk %x: %w", k, err)
			}
			st.chunks[ChunkID(k)] = r
			return nil
		})
	})
	return st, err
}

// copyMeta replaces everything in dst with the content of src, in one
// transaction on dst: a crash leaves dst wholly old or wholly new.
func copyMeta(dst, src *bolt.DB) (err error) {
	defer recoverBolt(&err)
	return src.View(func(stx *bolt.Tx) error {
		return dst.Update(func(dtx *bolt.Tx) error {
			for _, name := range allBuckets {
				if dtx.Bucket(name) != nil {
					if err := dtx.DeleteBucket(name); err != nil {
						return err
					}
				}
				db, err := dtx.CreateBucket(name)
				if err != nil {
					return err
				}
				sb := stx.Bucket(name)
				if sb == nil {
					continue
				}
				if err := sb.ForEach(func(k, v []byte) error { return db.Put(k, v) }); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
