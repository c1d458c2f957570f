// Package resstore keeps the NVMe reservations that hosts asked to
// persist through power loss (PTPL) in a bbolt database: it is the
// target.ReservationStore of `target serve` (DATA/reservations.db).
//
// One bucket per subsystem NQN; in it, one key per namespace (the NSID,
// 4 bytes big-endian) whose value is the target's encoded state. Every
// Save is one bbolt transaction, durable (fsync) when Save returns, so a
// reservation command that completed survives a crash or power loss of
// the target. Store's methods are safe for concurrent use.
package resstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/capsule-storage/capsule/nvmeof/target"
)

// Store is a bbolt-backed target.ReservationStore.
type Store struct {
	db *bolt.DB
}

var _ target.ReservationStore = (*Store)(nil)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("resstore: closed")

// Open opens or creates the database at path. It fails if another
// process holds it (after a second).
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("resstore: %w", err)
	}
	return &Store{db: db}, nil
}

func key(nsid uint32) []byte {
	var k [4]byte
	binary.BigEndian.PutUint32(k[:], nsid)
	return k[:]
}

// Load returns the state saved for the namespace, or nil.
func (s *Store) Load(subnqn string, nsid uint32) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(subnqn)); b != nil {
			if v := b.Get(key(nsid)); v != nil {
				out = append([]byte(nil), v...)
			}
		}
		return nil
	})
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return nil, ErrClosed
	}
	return out, err
}

// Save stores state for the namespace durably; nil deletes it.
func (s *Store) Save(subnqn string, nsid uint32, state []byte) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if state == nil {
			if b := tx.Bucket([]byte(subnqn)); b != nil {
				return b.Delete(key(nsid))
			}
			return nil
		}
		b, err := tx.CreateBucketIfNotExists([]byte(subnqn))
		if err != nil {
			return err
		}
		return b.Put(key(nsid), state)
	})
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }
