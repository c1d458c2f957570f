package chunkstore

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// metaDB is one metadata replica, as a few buckets of sorted keys: bbolt
// on the device's host file (boltDB, meta.db) where the device has one,
// or a log in the device's own files (logDB, meta.log; metalog.go) where
// it has none, as a remote device has not. The code of meta.go and
// records.go reads and writes either through kvTx.
type metaDB interface {
	// view runs fn in a read-only transaction.
	view(fn func(kvTx) error) error
	// update runs fn in a transaction that is durable when update
	// returns nil, and leaves the replica as it was when fn fails.
	update(fn func(kvTx) error) error
	close() error
}

// kvTx is a transaction on a replica's buckets. Keys and values it
// returns are valid until the transaction ends and must not be changed.
type kvTx interface {
	bucket(name []byte) kvBucket // nil when there is none
	createBucket(name []byte) (kvBucket, error)
	deleteBucket(name []byte) error
}

type kvBucket interface {
	get(k []byte) []byte
	put(k, v []byte) error
	del(k []byte) error
	forEach(fn func(k, v []byte) error) error
	cursor() kvCursor
}

// kvCursor walks a bucket in key order; nil keys at the end.
type kvCursor interface {
	seek(k []byte) ([]byte, []byte)
	next() ([]byte, []byte)
	// del deletes the key the cursor is at; seek again after it.
	del() error
}

// openMeta opens (or creates, empty) the replica of a device: bbolt at
// its host path, or the log when the FS has no host path or the store
// was told to use it (WithMetaLog).
func openMeta(fsys vfs.FS, useLog bool) (metaDB, error) {
	if !useLog {
		db, err := openBolt(fsys)
		if !errors.Is(err, vfs.ErrNotSupported) {
			if err != nil {
				return nil, err
			}
			return boltDB{db}, nil
		}
	}
	return openLog(fsys)
}

// boltDB is a replica in bbolt.
type boltDB struct{ db *bolt.DB }

func (b boltDB) view(fn func(kvTx) error) error {
	return b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltDB) update(fn func(kvTx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b boltDB) close() error { return b.db.Close() }

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) bucket(name []byte) kvBucket {
	if bk := t.tx.Bucket(name); bk != nil {
		return boltBucket{bk}
	}
	return nil
}

func (t boltTx) createBucket(name []byte) (kvBucket, error) {
	bk, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{bk}, nil
}

func (t boltTx) deleteBucket(name []byte) error {
	err := t.tx.DeleteBucket(name)
	if errors.Is(err, bolt.ErrBucketNotFound) {
		return nil
	}
	return err
}

type boltBucket struct{ bk *bolt.Bucket }

func (b boltBucket) get(k []byte) []byte                      { return b.bk.Get(k) }
func (b boltBucket) put(k, v []byte) error                    { return b.bk.Put(k, v) }
func (b boltBucket) del(k []byte) error                       { return b.bk.Delete(k) }
func (b boltBucket) forEach(fn func(k, v []byte) error) error { return b.bk.ForEach(fn) }
func (b boltBucket) cursor() kvCursor                         { return boltCursor{b.bk.Cursor()} }

type boltCursor struct{ c *bolt.Cursor }

func (c boltCursor) seek(k []byte) ([]byte, []byte) { return c.c.Seek(k) }
func (c boltCursor) next() ([]byte, []byte)         { return c.c.Next() }
func (c boltCursor) del() error                     { return c.c.Delete() }
