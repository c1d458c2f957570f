package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/capsule-storage/capsule/chunkstore"
)

// The namespace's durable home is the chunkstore's records
// (chunkstore.PutRecords): replicated on every device with the store's
// own metadata, changed only at checkpoints. The bbolt database the
// operations run their transactions in is a working copy: a scratch
// file, unlinked as soon as it is open, committed without fsync, and
// filled from the records at every Open. Each key a transaction writes
// or deletes is marked dirty; stage reads the dirty keys' values (absent:
// deleted) in one view, between writing transactions, and hands them to
// the store in one PutRecords call, which a checkpoint takes whole. So
// what a crash leaves is the namespace as of some stage, at or after the
// last Sync that completed.

// recordSpace is the name of the FSID's space in the store's records.
func recordSpace(fsid uint16) string { return fmt.Sprintf("fs/%04x", fsid) }

// A record's key is its bucket's tag (the bucket's index in allBuckets)
// followed by the bbolt key.
func bucketTag(name []byte) byte {
	for i, b := range allBuckets {
		if bytes.Equal(b, name) {
			return byte(i)
		}
	}
	panic(fmt.Sprintf("fs/server: unknown bucket %q", name))
}

// Bucket tags, in allBuckets order.
var (
	tagSuper   = bucketTag(bucketSuper)
	tagInodes  = bucketTag(bucketInodes)
	tagDirents = bucketTag(bucketDirents)
	tagCookies = bucketTag(bucketCookies)
	tagData    = bucketTag(bucketData)
	tagXattrs  = bucketTag(bucketXattrs)
	tagOrphans = bucketTag(bucketOrphans)
)

// put writes key in the bucket tagged tag and marks it dirty. The caller
// runs a writing transaction (under txMu, or in Open).
func (s *Server) put(tx *bolt.Tx, tag byte, key, value []byte) error {
	if err := tx.Bucket(allBuckets[tag]).Put(key, value); err != nil {
		return err
	}
	s.mark(tag, key)
	return nil
}

// del deletes key from the bucket tagged tag and marks it dirty.
func (s *Server) del(tx *bolt.Tx, tag byte, key []byte) error {
	if err := tx.Bucket(allBuckets[tag]).Delete(key); err != nil {
		return err
	}
	s.mark(tag, key)
	return nil
}

// mark records that key of the bucket tagged tag changed. A transaction
// that rolls back leaves its marks: stage then writes the same value
// again, which costs a record and changes nothing.
func (s *Server) mark(tag byte, key []byte) {
	k := make([]byte, 1+len(key))
	k[0] = tag
	copy(k[1:], key)
	s.metaDirty[string(k)] = struct{}{}
	s.dirty.Store(true)
}

// stage hands every dirty key's current value to the store, to become
// durable with the next checkpoint. It holds txMu, so the values are
// those between two writing transactions: a consistent namespace.
func (s *Server) stage() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return s.stageLocked()
}

func (s *Server) stageLocked() error {
	if len(s.metaDirty) == 0 {
		return nil
	}
	recs := make([]chunkstore.Record, 0, len(s.metaDirty))
	err := s.db.View(func(tx *bolt.Tx) error {
		curs := make([]*bolt.Cursor, len(allBuckets))
		for k := range s.metaDirty {
			tag, key := k[0], []byte(k[1:])
			if curs[tag] == nil {
				curs[tag] = tx.Bucket(allBuckets[tag]).Cursor()
			}
			rec := chunkstore.Record{Key: []byte(k)}
			// A cursor tells an empty value from no key (Get does not).
			if got, v := curs[tag].Seek(key); bytes.Equal(got, key) {
				rec.Value = append([]byte{}, v...)
			}
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.store.PutRecords(s.space, recs); err != nil {
		return err
	}
	clear(s.metaDirty)
	return nil
}

// loadBatch is how many records one transaction of the load writes.
const loadBatch = 50_000

// openScratch opens the working database: a new file in dir, unlinked
// at once (it lives as long as the Server holds it open and leaves
// nothing behind), with fsync off: the records are what is durable.
func openScratch(dir string) (*bolt.DB, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "capsule-fs-*.db")
	if err != nil {
		return nil, fmt.Errorf("fs/server: the working database: %w", err)
	}
	path := f.Name()
	f.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoGrowSync: true, NoFreelistSync: true,
		FreelistType: bolt.FreelistMapType})
	os.Remove(path)
	if err != nil {
		return nil, fmt.Errorf("fs/server: the working database: %w", err)
	}
	db.NoSync = true
	return db, nil
}

// load fills the working database from the store's records and reports
// whether there were any.
func (s *Server) load() (found bool, err error) {
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return false, err
	}
	var tx *bolt.Tx
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	n := 0
	err = s.store.Records(s.space, func(k, v []byte) error {
		if len(k) < 2 || int(k[0]) >= len(allBuckets) {
			return fmt.Errorf("fs/server: record %x of %s names no bucket: %w", k, s.space, chunkstore.ErrCorrupt)
		}
		if tx == nil {
			var err error
			if tx, err = s.db.Begin(true); err != nil {
				return err
			}
		}
		b := tx.Bucket(allBuckets[k[0]])
		b.FillPercent = 0.9 // records come in key order
		if err := b.Put(append([]byte(nil), k[1:]...), append([]byte{}, v...)); err != nil {
			return err
		}
		found = true
		if n++; n%loadBatch == 0 {
			err := tx.Commit()
			tx = nil
			return err
		}
		return nil
	})
	if err == nil && tx != nil {
		err = tx.Commit()
		tx = nil
	}
	return found, err
}

// importLegacy copies a metadata database of the first format (its own
// fsynced bbolt file, outside the store) into the working database,
// marking every key dirty, so that the next stage puts it all into the
// store's records. It reports whether there was one.
func (s *Server) importLegacy(path string) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	old, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return false, fmt.Errorf("fs/server: importing %s: %w", path, err)
	}
	defer old.Close()
	err = old.View(func(otx *bolt.Tx) error {
		return s.db.Update(func(tx *bolt.Tx) error {
			for i, name := range allBuckets {
				ob := otx.Bucket(name)
				if ob == nil {
					continue
				}
				if err := ob.ForEach(func(k, v []byte) error {
					return s.put(tx, byte(i), append([]byte(nil), k...), append([]byte{}, v...))
				}); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("fs/server: importing %s: %w", path, err)
	}
	return true, nil
}
