package chunkstore

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// Migrate converts a store of format version 1 (copy-on-write stripes)
// to version 2 (the log) in place. The stripes stay where they are: a
// version 1 stripe is a valid version 2 slot, its shard headers name it
// by its old key, and the cleaner derives what it holds from that key.
// Only the metadata changes: every replica's block map and chunk records
// become slot records and map pages, in one bbolt transaction per
// replica, and then every identity record is rewritten (temporary file,
// fsync, rename). A crash at any point leaves a store that Open refuses
// with ErrFormatV1 and that Migrate, run again, finishes: a replica
// already converted is the source for the others. Up to M devices may be
// missing; Rebuild replaces them afterwards.
//
// MigrateReport says what was converted; Progress, if set, is called
// after each step.
func Migrate(devs []vfs.FS, opts MigrateOptions) (MigrateReport, error) {
	var rep MigrateReport
	n := len(devs)
	if n == 0 {
		return rep, fmt.Errorf("%w: no devices", ErrInvalidArgument)
	}
	ids := make([]identity, n)
	vers := make([]int, n)
	ok := make([]bool, n)
	votes := map[[16]byte]int{}
	for i, fsys := range devs {
		b, err := vfs.ReadFile(fsys, identityFile)
		if err != nil {
			continue
		}
		id, v, err := decodeIdentityAny(b)
		if err != nil {
			continue
		}
		ids[i], vers[i], ok[i] = id, v, true
		votes[id.Store]++
	}
	var store [16]byte
	best := 0
	for id, c := range votes {
		if c > best {
			best, store = c, id
		}
	}
	if best == 0 {
		return rep, ErrNoStore
	}
	var ref identity
	for i := range ids {
		if ok[i] && ids[i].Store == store {
			ref = ids[i]
			break
		}
	}
	if ref.Geo.Devices() != n {
		return rep, fmt.Errorf("%w: the store is %s on %d devices, %d given", ErrInvalidArgument, ref.Geo, ref.Geo.Devices(), n)
	}
	if missing := n - best; missing > ref.Geo.Parity {
		return rep, fmt.Errorf("%w: %d of %d devices hold no identity of the store", ErrTooManyFailures, missing, n)
	}
	dbs := make([]*bolt.DB, n)
	defer func() {
		for _, db := range dbs {
			if db != nil {
				_ = db.Close()
			}
		}
	}()
	srcPos := -1
	var srcSB superblock
	for i, fsys := range devs {
		if !ok[i] || ids[i].Store != store || ids[i].Pos != i {
			continue
		}
		db, err := openBolt(fsys)
		if err != nil {
			if errors.Is(err, ErrDeviceBusy) {
				return rep, &DeviceError{Pos: i, Device: fsys.String(), Err: err}
			}
			continue
		}
		dbs[i] = db
		sb, err := readSuper(boltDB{db})
		if err != nil {
			continue
		}
		// The freshest replica is the source; a converted one (Seq+1) wins.
		if srcPos < 0 || sb.Seq > srcSB.Seq {
			srcPos, srcSB = i, sb
		}
	}
	if srcPos < 0 {
		return rep, fmt.Errorf("%w: no readable metadata replica", ErrNoStore)
	}
	steps := 2 * n
	step := func() {
		rep.Steps++
		if opts.Progress != nil {
			opts.Progress(Progress{Stripes: int64(steps), Done: int64(rep.Steps)})
		}
	}
	if srcSB.Version == formatV1 {
		if err := convertReplica(dbs[srcPos], ref, &rep); err != nil {
			return rep, fmt.Errorf("chunkstore: migrate: device %d: %w", srcPos, err)
		}
		rep.Converted = true
	} else {
		st, err := loadMeta(boltDB{dbs[srcPos]})
		if err != nil {
			return rep, fmt.Errorf("chunkstore: migrate: device %d: %w", srcPos, err)
		}
		rep.Volumes, rep.Chunks, rep.Stripes = len(st.volumes), len(st.chunks), len(st.slots)
	}
	step()
	for i, db := range dbs {
		if db == nil || i == srcPos {
			continue
		}
		if sb, err := readSuper(boltDB{db}); err == nil && sb.Version == formatVersion && sb.Seq == srcSB.Seq+boolInt(rep.Converted) {
			step()
			continue
		}
		if err := copyMeta(boltDB{db}, boltDB{dbs[srcPos]}); err != nil {
			return rep, fmt.Errorf("chunkstore: migrate: device %d: %w", i, err)
		}
		step()
	}
	for i, fsys := range devs {
		if !ok[i] || ids[i].Store != store || dbs[i] == nil {
			step()
			continue
		}
		if vers[i] != formatVersion {
			if err := vfs.WriteFile(fsys, identityFile, ids[i].encode()); err != nil {
				return rep, &DeviceError{Pos: i, Device: fsys.String(), Err: err}
			}
			rep.Identities++
		}
		step()
	}
	return rep, nil
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	// Progress, if set, is called after each step (Stripes is the number
	// of steps, two per device).
	Progress func(Progress)
}

// MigrateReport says what Migrate did.
type MigrateReport struct {
	// Converted is true when this call converted the metadata (false when
	// an earlier, interrupted call had, or the store was version 2).
	Converted bool
	// Volumes, Chunks and Stripes count what the converted metadata
	// holds.
	Volumes, Chunks, Stripes int
	// Identities counts the identity records rewritten.
	Identities int
	Steps      int
}

// MigrateDirs is Migrate on directories.
func MigrateDirs(dirs []string, opts MigrateOptions) (MigrateReport, error) {
	return Migrate(osDevices(dirs), opts)
}

// convertReplica rewrites one version 1 replica as version 2, in one
// transaction.
func convertReplica(db *bolt.DB, id identity, rep *MigrateReport) (err error) {
	defer recoverBolt(&err)
	return db.Update(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketStore)
		if st == nil || st.Get(keySuper) == nil {
			return corruptf("metadata has no superblock")
		}
		sb, err := decodeSuperblock(st.Get(keySuper))
		if err != nil {
			return err
		}
		if sb.Version != formatV1 {
			return nil
		}
		k, unit := id.Geo.Data, id.Unit
		capSec := k * unit / SectorSize
		stripeBytes := int64(k * unit)
		if err := createBuckets(boltTx{tx}); err != nil {
			return err
		}
		slots, pages := tx.Bucket(bucketSlots), tx.Bucket(bucketPages)
		vols := map[uint64]int64{} // owner → size
		if err := tx.Bucket(bucketVolumes).ForEach(func(k, v []byte) error {
			r, err := decodeVolumeRecord(v)
			if err != nil {
				return fmt.Errorf("volume %q: %w", k, err)
			}
			vols[r.Owner] = r.Size
			rep.Volumes++
			return nil
		}); err != nil {
			return err
		}
		maps := map[uint64]*ownerMap{}
		var scratch []pageRun
		nop := func(uint64, int) {}
		put := func(key stripeKey, e extent, bytes int64) error {
			sectors := int((bytes + SectorSize - 1) / SectorSize)
			if sectors <= 0 || sectors > capSec {
				return corruptf("stripe %d/%d holds %d bytes", key.Owner, key.Index, bytes)
			}
			r := slotRecord{Key: key, Ext: e, Sectors: sectors}
			if slots.Get(slotKey(e.Slot)) != nil {
				return corruptf("slot %d is named twice", e.Slot)
			}
			if err := slots.Put(slotKey(e.Slot), r.encode()); err != nil {
				return err
			}
			m := maps[key.Owner]
			if m == nil {
				m = newOwnerMap()
				maps[key.Owner] = m
			}
			m.update(key.Index*uint64(capSec), sectors, true, e.Slot, 0, &scratch, nop)
			rep.Stripes++
			return nil
		}
		if mb := tx.Bucket(bucketMapV1); mb != nil {
			if err := mb.ForEach(func(kb, v []byte) error {
				key, err := decodeStripeKey(kb)
				if err != nil {
					return err
				}
				e, err := decodeExtent(v)
				if err != nil {
					return fmt.Errorf("stripe %d/%d: %w", key.Owner, key.Index, err)
				}
				size, ok := vols[key.Owner]
				if !ok {
					return nil // a deleted volume's leftover: its slots are free
				}
				return put(key, e, min(stripeBytes, size-int64(key.Index)*stripeBytes))
			}); err != nil {
				return err
			}
			if err := tx.DeleteBucket(bucketMapV1); err != nil {
				return err
			}
		}
		chunks := tx.Bucket(bucketChunks)
		type conv struct {
			key []byte
			rec chunkRecord
		}
		var cs []conv
		if err := chunks.ForEach(func(kb, v []byte) error {
			r, err := decodeChunkRecord(v)
			if err != nil {
				return fmt.Errorf("chunk %x: %w", kb, err)
			}
			cs = append(cs, conv{key: append([]byte(nil), kb...), rec: r})
			return nil
		}); err != nil {
			return err
		}
		for _, c := range cs {
			for i, e := range c.rec.Stripes {
				if err := put(stripeKey{Owner: c.rec.Owner, Index: uint64(i)}, e, min(stripeBytes, c.rec.Length-int64(i)*stripeBytes)); err != nil {
					return err
				}
			}
			if maps[c.rec.Owner] == nil {
				maps[c.rec.Owner] = newOwnerMap()
			}
			if err := chunks.Put(c.key, c.rec.encodeV2()); err != nil {
				return err
			}
			rep.Chunks++
		}
		for owner, m := range maps {
			for page, runs := range m.pages {
				if err := pages.Put(pageKey(owner, page), encodePage(runs)); err != nil {
					return err
				}
			}
		}
		// A rebuild in progress restarts from the first slot: its cursor
		// counted stripe keys.
		devs := tx.Bucket(bucketDevices)
		var redo [][2][]byte
		if err := devs.ForEach(func(k, v []byte) error {
			r, err := decodeDeviceRecord(v)
			if err != nil {
				return err
			}
			if r.State == recRebuilding && r.Cursor != (stripeKey{}) {
				r.Cursor = stripeKey{}
				redo = append(redo, [2][]byte{append([]byte(nil), k...), r.encode()})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, kv := range redo {
			if err := devs.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		sb.Version = formatVersion
		sb.Seq++
		sb.LogGen = sb.GenHigh
		if err := st.Put(keyResv, encodeResv(nil)); err != nil {
			return err
		}
		return st.Put(keySuper, sb.encode())
	})
}
