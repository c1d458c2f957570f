package mapdbbench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
)

// Batch is the set of pages a checkpoint changes, sorted by key.
type Batch struct {
	Keys [][]byte
	Vals [][]byte
}

// Len is the number of pages in the batch.
func (b *Batch) Len() int { return len(b.Keys) }

// Replica is one device's copy of the map.
type Replica interface {
	// Apply writes the batch in one transaction and returns once it is
	// durable (fsynced).
	Apply(b *Batch) error
	// Load calls fn for every key and value in key order, as Open does to
	// build the in-memory map; k and v are valid only during the call.
	Load(fn func(k, v []byte)) (int, error)
	// Quiesce waits until no background work (flushes, compactions) is
	// in progress or due, or until timeout.
	Quiesce(timeout time.Duration) error
	Close() error
}

// Kind names a database: "bbolt" or "pebble".
type Kind string

// The databases measured.
const (
	Bolt   Kind = "bbolt"
	Pebble Kind = "pebble"
)

// Open opens (creating if need be) the replica of kind in dir.
func Open(kind Kind, dir string) (Replica, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	switch kind {
	case Bolt:
		return openBolt(dir)
	case Pebble:
		return openPebble(dir)
	}
	return nil, fmt.Errorf("mapdbbench: unknown database %q", kind)
}

var mapBucket = []byte("map")

// boltOptions are the options chunkstore opens its replicas with.
var boltOptions = bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType}

type boltReplica struct{ db *bolt.DB }

func openBolt(dir string) (*boltReplica, error) {
	o := boltOptions
	db, err := bolt.Open(filepath.Join(dir, "map.db"), 0o644, &o)
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(mapBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	return &boltReplica{db}, nil
}

func (r *boltReplica) Apply(b *Batch) error {
	return r.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(mapBucket)
		for i, k := range b.Keys {
			if err := bk.Put(k, b.Vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (r *boltReplica) Load(fn func(k, v []byte)) (int, error) {
	n := 0
	err := r.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(mapBucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			fn(k, v)
			n++
		}
		return nil
	})
	return n, err
}

func (r *boltReplica) Quiesce(time.Duration) error { return nil }
func (r *boltReplica) Close() error                { return r.db.Close() }

// PebbleMemTableSize is the memtable size the pebble replicas use: 32 MiB
// rather than the 4 MiB default, so that a checkpoint of 8192 random
// pages (6.5 MB) fits in a memtable; a replica may hold two (the stop
// writes threshold), 64 MiB.
const PebbleMemTableSize = 32 << 20

type pebbleReplica struct{ db *pebble.DB }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func pebbleOptions() *pebble.Options {
	return &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       PebbleMemTableSize,
		Logger:             quietLogger{},
	}
}

func openPebble(dir string) (*pebbleReplica, error) {
	db, err := pebble.Open(dir, pebbleOptions())
	if err != nil {
		return nil, err
	}
	return &pebbleReplica{db}, nil
}

func (r *pebbleReplica) Apply(b *Batch) error {
	size := 0
	for i, k := range b.Keys {
		size += len(k) + len(b.Vals[i]) + 8
	}
	wb := r.db.NewBatchWithSize(size)
	for i, k := range b.Keys {
		if err := wb.Set(k, b.Vals[i], nil); err != nil {
			wb.Close()
			return err
		}
	}
	if err := wb.Commit(pebble.Sync); err != nil {
		wb.Close()
		return err
	}
	return wb.Close()
}

func (r *pebbleReplica) Load(fn func(k, v []byte)) (int, error) {
	it, err := r.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return n, err
		}
		fn(it.Key(), v)
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}

func (r *pebbleReplica) Quiesce(timeout time.Duration) error {
	// Pebble picks the next compaction as one ends, so a few idle polls in
	// a row mean it found nothing left to do.
	deadline := time.Now().Add(timeout)
	for idle := 0; idle < 5; {
		m := r.db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			idle++
		} else {
			idle = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pebble: still busy after %v: %d compactions in progress", timeout, m.Compact.NumInProgress)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func (r *pebbleReplica) Close() error { return r.db.Close() }

// Flush writes pebble's memtable to an sstable; bbolt has nothing to do.
func Flush(r Replica) error {
	if p, ok := r.(*pebbleReplica); ok {
		return p.db.Flush()
	}
	return nil
}

// Verify checks that r holds exactly the pages 0..n-1 of owner, each with
// a well-formed value.
func Verify(r Replica, owner uint64, n int) error {
	var bad error
	next := uint64(0)
	got, err := r.Load(func(k, v []byte) {
		if bad != nil {
			return
		}
		if !bytes.Equal(k, Key(owner, next)) {
			bad = fmt.Errorf("key %x, want page %d", k, next)
		} else if _, ok := CheckValue(v); !ok {
			bad = fmt.Errorf("page %d: bad value", next)
		}
		next++
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	if got != n {
		return fmt.Errorf("%d pages, want %d", got, n)
	}
	return nil
}
