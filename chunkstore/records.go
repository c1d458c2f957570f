package chunkstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/capsule-storage/capsule/internal/crc32c"
)

// Records are small key-value records that a user of the store keeps in
// the store's own metadata: they are replicated on every device with the
// slot records and maps, so they survive what the data survives (any M
// devices lost), and they change only at checkpoints, atomically with
// the chunk records of the same checkpoint. The file service keeps its
// namespace in them (fs/server).
//
// Records live in spaces, named by their users. A PutRecords call is
// atomic: a checkpoint takes all of its records or none, and a
// checkpoint takes every call that returned before it began. So a
// crash leaves each space as it was after some PutRecords call made
// before the last Sync that returned, or later.

// bucketRecords holds every space's records: key = length of the space
// name (1 byte), the name, the record's key; value = encodeRecord.
// Stores made before records existed have no such bucket: it is made by
// the first checkpoint that writes one, and its absence reads as empty.
var bucketRecords = []byte("records")

// Record limits. A record's stored key (space and key) stays under
// bbolt's key limit; its value is bounded so that one PutRecords call
// cannot make a checkpoint unboundedly large.
const (
	MaxRecordSpace = 255
	MaxRecordKey   = 4096
	MaxRecordValue = 16 << 20
)

// Record is one record of a space; a nil Value deletes Key (an empty,
// non-nil Value is a record with no bytes).
type Record struct {
	Key, Value []byte
}

// Record value offsets: the value's bytes, then a CRC32C of the stored
// key and the value.
const recordCRCSize = 4

func recordKey(space string, key []byte) []byte {
	k := make([]byte, 1+len(space)+len(key))
	k[0] = byte(len(space))
	copy(k[1:], space)
	copy(k[1+len(space):], key)
	return k
}

func recordSum(key, value []byte) uint32 {
	return crc32c.Update(crc32c.Checksum(key), value)
}

// encodeRecord is the stored value of a record whose stored key is key.
func encodeRecord(key, value []byte) []byte {
	b := make([]byte, len(value)+recordCRCSize)
	copy(b, value)
	binary.LittleEndian.PutUint32(b[len(value):], recordSum(key, value))
	return b
}

// decodeRecord checks a stored record and returns its value (aliasing b).
func decodeRecord(key, b []byte) ([]byte, error) {
	if len(b) < recordCRCSize {
		return nil, corruptf("record of %d bytes", len(b))
	}
	v := b[:len(b)-recordCRCSize]
	if binary.LittleEndian.Uint32(b[len(v):]) != recordSum(key, v) {
		return nil, corruptf("record %q: checksum mismatch", key)
	}
	return v, nil
}

func checkSpace(space string) error {
	if space == "" || len(space) > MaxRecordSpace {
		return fmt.Errorf("%w: record space %q: want 1 to %d bytes", ErrInvalidArgument, space, MaxRecordSpace)
	}
	return nil
}

// PutRecords stages recs in space. They are durable after the next Sync
// (which, with records waiting, is a checkpoint) or the next
// checkpoint, all together; until then Records returns them and a
// crash forgets them all. Later calls win over earlier ones for the
// same key. It does not retain recs.
func (s *Store) PutRecords(space string, recs []Record) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := checkSpace(space); err != nil {
		return err
	}
	keys := make([]string, len(recs))
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		if len(r.Key) == 0 || len(r.Key) > MaxRecordKey || len(r.Value) > MaxRecordValue {
			return fmt.Errorf("%w: record of a %d-byte key and a %d-byte value (keys 1 to %d bytes, values at most %d)",
				ErrInvalidArgument, len(r.Key), len(r.Value), MaxRecordKey, MaxRecordValue)
		}
		k := recordKey(space, r.Key)
		keys[i] = string(k)
		if r.Value != nil {
			vals[i] = encodeRecord(k, r.Value)
		}
	}
	s.lmu.Lock()
	for i, k := range keys {
		s.records[k] = vals[i]
	}
	if len(recs) > 0 {
		s.ckptNeeded = true
	}
	s.lmu.Unlock()
	return nil
}

// Records calls fn for every record of space, in key order: the
// committed ones with the staged ones over them. key and value are
// valid only during fn. An error from fn stops the walk and is
// returned.
func (s *Store) Records(space string, fn func(key, value []byte) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := checkSpace(space); err != nil {
		return err
	}
	// No checkpoint runs meanwhile: the replica read and the staged
	// records are from the same moment.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	prefix := recordKey(space, nil)
	s.lmu.Lock()
	var staged []string
	for k := range s.records {
		if len(k) > len(prefix) && k[:len(prefix)] == string(prefix) {
			staged = append(staged, k)
		}
	}
	sort.Strings(staged)
	stagedVals := make([][]byte, len(staged))
	for i, k := range staged {
		stagedVals[i] = s.records[k]
	}
	s.lmu.Unlock()

	var lastErr error = ErrTooManyFailures
	for _, d := range s.devs {
		f := d.files.Load()
		if !d.writable() || f == nil || f.db == nil {
			continue
		}
		err, ok := walkRecords(f.db, prefix, staged, stagedVals, fn)
		if ok {
			return err
		}
		lastErr = err // this replica did not read: try the next
	}
	return lastErr
}

// walkRecords merges a replica's records under prefix with the staged
// ones (sorted stored keys and their encoded values, nil for deleted)
// into fn. ok is false when the replica failed before fn was called
// (so another may be tried).
func walkRecords(db metaDB, prefix []byte, staged []string, vals [][]byte, fn func(k, v []byte) error) (err error, ok bool) {
	called := false
	defer func() {
		if r := recover(); r != nil {
			err, ok = corruptf("metadata replica: %v", r), called
		}
	}()
	emit := func(k, stored []byte) error {
		v, err := decodeRecord(k, stored)
		if err != nil {
			return err
		}
		called = true
		return fn(k[len(prefix):], v)
	}
	err = db.view(func(tx kvTx) error {
		var cur kvCursor
		if bk := tx.bucket(bucketRecords); bk != nil {
			cur = bk.cursor()
		}
		var k, v []byte
		if cur != nil {
			k, v = cur.seek(prefix)
		}
		i := 0
		for {
			if k != nil && !bytes.HasPrefix(k, prefix) {
				k = nil
			}
			if k == nil && i == len(staged) {
				return nil
			}
			switch {
			case i < len(staged) && (k == nil || staged[i] <= string(k)):
				if k != nil && staged[i] == string(k) {
					k, v = cur.next() // the staged record replaces it
				}
				sk := []byte(staged[i])
				if vals[i] != nil {
					if err := emit(sk, vals[i]); err != nil {
						return err
					}
				}
				i++
			default:
				if err := emit(k, v); err != nil {
					return err
				}
				k, v = cur.next()
			}
		}
	})
	return err, called || err == nil || !IsCorruption(err)
}

// takeRecords moves the staged records into b (under lmu).
func (s *Store) takeRecordsLocked(b *batch) {
	if len(s.records) == 0 {
		return
	}
	b.records = s.records
	s.records = map[string][]byte{}
}

// restoreRecordsLocked puts back the records of a failed checkpoint,
// under any staged since (under lmu).
func (s *Store) restoreRecordsLocked(taken map[string][]byte) {
	for k, v := range taken {
		if _, newer := s.records[k]; !newer {
			s.records[k] = v
		}
	}
	if len(taken) > 0 {
		s.ckptNeeded = true
	}
}

// applyRecords writes a batch's records into a replica.
func applyRecords(tx kvTx, recs map[string][]byte) error {
	if len(recs) == 0 {
		return nil
	}
	bk, err := tx.createBucket(bucketRecords)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	sort.Strings(keys) // bbolt writes sorted keys with fewer page splits
	for _, k := range keys {
		if v := recs[k]; v == nil {
			err = bk.del([]byte(k))
		} else {
			err = bk.put([]byte(k), v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
