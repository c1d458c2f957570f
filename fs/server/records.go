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
// own metadata, changed only at checkpoints. The database the
// operations run their transactions in is a working copy in memory
// (memdb.go), filled from the records at every Open. Each key a transaction writes
// or deletes is marked dirty; stage reads the dirty keys' values (absent:
// deleted) in one view, between writing transactions, and hands them to
// the store in one PutRecords call, which a checkpoint takes whole. So
// what a crash leaves is the namespace as of some stage, at or after the
// last Sync that completed.

// recordSpace is the name of the FSID's space in the store's records.
func recordSpace(fsid uint16) string { return fmt.Sprintf("fs/%04x", fsid) }

// A record's key is its bucket's tag (the bucket's index in allBuckets)
// followed by the bucket's key.
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
func (s *Server) put(tx *memTx, tag byte, key, value []byte) error {
	if err := tx.bucketAt(int(tag)).Put(key, value); err != nil {
		return err
	}
	s.mark(tag, key)
	return nil
}

// del deletes key from the bucket tagged tag and marks it dirty.
func (s *Server) del(tx *memTx, tag byte, key []byte) error {
	if err := tx.bucketAt(int(tag)).Delete(key); err != nil {
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
	err := s.db.View(func(tx *memTx) error {
		curs := make([]*memCursor, len(allBuckets))
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

// load fills the working database from the store's records and reports
// whether there were any.
func (s *Server) load() (found bool, err error) {
	err = s.db.Update(func(tx *memTx) error {
		return s.store.Records(s.space, func(k, v []byte) error {
			if len(k) < 2 || int(k[0]) >= len(allBuckets) {
				return fmt.Errorf("fs/server: record %x of %s names no bucket: %w", k, s.space, chunkstore.ErrCorrupt)
			}
			found = true
			return tx.Bucket(allBuckets[k[0]]).Put(k[1:], v)
		})
	})
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
		return s.db.Update(func(tx *memTx) error {
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
