package chunkstore

import (
	"encoding/binary"
	"fmt"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// The metadata database: one bbolt file per device, all holding the same
// content. Buckets (format version 2):
//
//	store    "super" → superblock (Seq orders the replicas)
//	         "resv"  → the log reservation (encodeResv)
//	devices  u16 position → deviceRecord
//	volumes  name → volumeRecord
//	slots    u64 slot → slotRecord, for every slot that holds a stripe
//	pages    (owner, page) → map page, for every page with a mapped sector
//	chunks   ChunkID → chunkRecord (encodeV2)
//	records  space + key → record (records.go; absent in stores that
//	         never had one)
//
// A version 1 store (read by Migrate only) has "map" (stripeKey → extent)
// instead of slots and pages, and chunk records with their stripes.
var (
	bucketStore   = []byte("store")
	bucketDevices = []byte("devices")
	bucketVolumes = []byte("volumes")
	bucketSlots   = []byte("slots")
	bucketPages   = []byte("pages")
	bucketChunks  = []byte("chunks")
	bucketMapV1   = []byte("map")
	keySuper      = []byte("super")
	keyResv       = []byte("resv")
	allBuckets    = [][]byte{bucketStore, bucketDevices, bucketVolumes, bucketSlots, bucketPages, bucketChunks}
)

const boltLockTimeout = time.Second

var errBoltTimeout = berrors.ErrTimeout

// batch is the content of one commit, applied identically to every
// replica in one bbolt transaction each.
type batch struct {
	super   superblock
	resv    []uint64
	devices map[int]deviceRecord
	volumes map[string]*volumeRecord // nil value: delete
	slots   []slotChange
	pages   []pageChange
	// dropOwners deletes every page of these owners (deleted volumes and
	// replaced chunks), after pages are applied.
	dropOwners []uint64
	chunks     map[ChunkID]*chunkRecord // nil value: delete
	// records are the staged records (records.go): stored key → stored
	// value, nil to delete.
	records map[string][]byte
}

type slotChange struct {
	slot uint64
	rec  []byte // nil: delete
}

type pageChange struct {
	owner, page uint64
	val         []byte // nil: delete
}

func newBatch() *batch {
	return &batch{devices: map[int]deviceRecord{}, volumes: map[string]*volumeRecord{}, chunks: map[ChunkID]*chunkRecord{}}
}

func posKey(pos int) []byte {
	var k [2]byte
	binary.BigEndian.PutUint16(k[:], uint16(pos))
	return k[:]
}

func createBuckets(tx kvTx) error {
	for _, name := range allBuckets {
		if _, err := tx.createBucket(name); err != nil {
			return err
		}
	}
	return nil
}

// apply writes b into a replica.
func (b *batch) apply(tx kvTx) error {
	if err := createBuckets(tx); err != nil {
		return err
	}
	st := tx.bucket(bucketStore)
	if err := st.put(keySuper, b.super.encode()); err != nil {
		return err
	}
	if err := st.put(keyResv, encodeResv(b.resv)); err != nil {
		return err
	}
	devs := tx.bucket(bucketDevices)
	for pos, r := range b.devices {
		if err := devs.put(posKey(pos), r.encode()); err != nil {
			return err
		}
	}
	vols := tx.bucket(bucketVolumes)
	for name, r := range b.volumes {
		var err error
		if r == nil {
			err = vols.del([]byte(name))
		} else {
			err = vols.put([]byte(name), r.encode())
		}
		if err != nil {
			return err
		}
	}
	sl := tx.bucket(bucketSlots)
	for _, c := range b.slots {
		var err error
		if c.rec == nil {
			err = sl.del(slotKey(c.slot))
		} else {
			err = sl.put(slotKey(c.slot), c.rec)
		}
		if err != nil {
			return err
		}
	}
	pg := tx.bucket(bucketPages)
	for _, c := range b.pages {
		var err error
		if c.val == nil {
			err = pg.del(pageKey(c.owner, c.page))
		} else {
			err = pg.put(pageKey(c.owner, c.page), c.val)
		}
		if err != nil {
			return err
		}
	}
	for _, owner := range b.dropOwners {
		if err := dropPrefix(pg, pageKey(owner, 0)[:8]); err != nil {
			return err
		}
	}
	chunks := tx.bucket(bucketChunks)
	for id, r := range b.chunks {
		var err error
		if r == nil {
			err = chunks.del(id[:])
		} else {
			err = chunks.put(id[:], r.encodeV2())
		}
		if err != nil {
			return err
		}
	}
	return applyRecords(tx, b.records)
}

// dropPrefix deletes every key of bk that starts with prefix.
func dropPrefix(bk kvBucket, prefix []byte) error {
	cur := bk.cursor()
	for k, _ := cur.seek(prefix); k != nil && len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix); k, _ = cur.seek(prefix) {
		if err := cur.del(); err != nil {
			return err
		}
	}
	return nil
}

// readSuper returns a replica's superblock.
func readSuper(db metaDB) (sb superblock, err error) {
	defer recoverBolt(&err)
	err = db.view(func(tx kvTx) error {
		bk := tx.bucket(bucketStore)
		if bk == nil {
			return corruptf("metadata has no store bucket")
		}
		v := bk.get(keySuper)
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
	resv    []uint64
	devices map[int]deviceRecord
	volumes map[string]volumeRecord
	slots   map[uint64]slotRecord
	pages   map[uint64]map[uint64][]pageRun // owner → page → runs
	chunks  map[ChunkID]chunkRecord
}

// loadMeta reads and validates every record of a version 2 replica.
func loadMeta(db metaDB) (st *metaState, err error) {
	defer recoverBolt(&err)
	st = &metaState{
		devices: map[int]deviceRecord{},
		volumes: map[string]volumeRecord{},
		slots:   map[uint64]slotRecord{},
		pages:   map[uint64]map[uint64][]pageRun{},
		chunks:  map[ChunkID]chunkRecord{},
	}
	err = db.view(func(tx kvTx) error {
		v := tx.bucket(bucketStore)
		if v == nil || v.get(keySuper) == nil {
			return corruptf("metadata has no superblock")
		}
		var err error
		if st.super, err = decodeSuperblock(v.get(keySuper)); err != nil {
			return err
		}
		if st.super.Version != formatVersion {
			return ErrFormatV1
		}
		for _, name := range allBuckets {
			if tx.bucket(name) == nil {
				return corruptf("metadata has no %s bucket", name)
			}
		}
		if r := v.get(keyResv); r != nil {
			if st.resv, err = decodeResv(r); err != nil {
				return err
			}
		}
		if err := tx.bucket(bucketDevices).forEach(func(k, v []byte) error {
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
		if err := tx.bucket(bucketVolumes).forEach(func(k, v []byte) error {
			r, err := decodeVolumeRecord(v)
			if err != nil {
				return fmt.Errorf("volume %q: %w", k, err)
			}
			st.volumes[string(k)] = r
			return nil
		}); err != nil {
			return err
		}
		if err := tx.bucket(bucketSlots).forEach(func(k, v []byte) error {
			if len(k) != 8 {
				return corruptf("slot key of %d bytes", len(k))
			}
			r, err := decodeSlotRecord(v)
			if err != nil {
				return fmt.Errorf("slot %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if r.Ext.Slot != binary.BigEndian.Uint64(k) {
				return corruptf("slot record %d names slot %d", binary.BigEndian.Uint64(k), r.Ext.Slot)
			}
			st.slots[r.Ext.Slot] = r
			return nil
		}); err != nil {
			return err
		}
		if err := tx.bucket(bucketPages).forEach(func(k, v []byte) error {
			owner, page, err := decodePageKey(k)
			if err != nil {
				return err
			}
			runs, err := decodePage(v)
			if err != nil {
				return fmt.Errorf("map page %d/%d: %w", owner, page, err)
			}
			m := st.pages[owner]
			if m == nil {
				m = map[uint64][]pageRun{}
				st.pages[owner] = m
			}
			m[page] = runs
			return nil
		}); err != nil {
			return err
		}
		return tx.bucket(bucketChunks).forEach(func(k, v []byte) error {
			if len(k) != len(ChunkID{}) {
				return corruptf("chunk key of %d bytes", len(k))
			}
			r, err := decodeChunkRecordV2(v)
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
func copyMeta(dst, src metaDB) (err error) {
	defer recoverBolt(&err)
	return src.view(func(stx kvTx) error {
		return dst.update(func(dtx kvTx) error {
			if dtx.bucket(bucketMapV1) != nil {
				if err := dtx.deleteBucket(bucketMapV1); err != nil {
					return err
				}
			}
			for _, name := range append(allBuckets, bucketRecords) {
				if dtx.bucket(name) != nil {
					if err := dtx.deleteBucket(name); err != nil {
						return err
					}
				}
				db, err := dtx.createBucket(name)
				if err != nil {
					return err
				}
				sb := stx.bucket(name)
				if sb == nil {
					if string(name) == string(bucketRecords) {
						// The source never had records: neither
						// has the copy.
						if err := dtx.deleteBucket(name); err != nil {
							return err
						}
					}
					continue
				}
				if err := sb.forEach(func(k, v []byte) error { return db.put(k, v) }); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
