package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMemDB: a committed transaction is seen whole, a failed one not at
// all; a reader keeps the snapshot it began with while a writer commits;
// empty values exist; a cursor walks in order and deletes under itself.
func TestMemDB(t *testing.T) {
	db := newMemDB()
	b := bucketDirents
	require.NoError(t, db.Update(func(tx *memTx) error {
		for i := range 10 {
			if err := tx.Bucket(b).Put([]byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprint(i))); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketOrphans).Put([]byte("empty"), nil)
	}))
	boom := errors.New("boom")
	require.ErrorIs(t, db.Update(func(tx *memTx) error {
		require.NoError(t, tx.Bucket(b).Put([]byte("k0"), []byte("changed")))
		require.NoError(t, tx.Bucket(b).Delete([]byte("k1")))
		require.Equal(t, "changed", string(tx.Bucket(b).Get([]byte("k0"))), "a transaction sees its own writes")
		return boom
	}), boom)

	require.NoError(t, db.View(func(old *memTx) error {
		require.Equal(t, "0", string(old.Bucket(b).Get([]byte("k0"))), "a failed transaction changed nothing")
		require.Equal(t, "1", string(old.Bucket(b).Get([]byte("k1"))))
		require.NotNil(t, old.Bucket(bucketOrphans).Get([]byte("empty")), "an empty value exists")
		require.Nil(t, old.Bucket(bucketOrphans).Get([]byte("none")))
		// A writer commits while this reader runs.
		require.NoError(t, db.Update(func(tx *memTx) error {
			c := tx.Bucket(b).Cursor()
			n := 0
			for k, _ := c.Seek([]byte("k")); k != nil; k, _ = c.Next() {
				if n%2 == 0 {
					require.NoError(t, c.Delete())
				}
				n++
			}
			require.Equal(t, 10, n, "the cursor visits every key once while deleting")
			return nil
		}))
		require.Equal(t, "0", string(old.Bucket(b).Get([]byte("k0"))), "the reader keeps its snapshot")
		return nil
	}))
	require.NoError(t, db.View(func(tx *memTx) error {
		var keys []string
		require.NoError(t, tx.Bucket(b).ForEach(func(k, v []byte) error {
			keys = append(keys, string(k))
			return nil
		}))
		require.Equal(t, []string{"k1", "k3", "k5", "k7", "k9"}, keys)
		require.ErrorIs(t, tx.Bucket(b).Put([]byte("x"), nil), errReadOnly)
		return nil
	}))
	require.NoError(t, db.Close())
	require.ErrorIs(t, db.View(func(*memTx) error { return nil }), errClosed)
	require.ErrorIs(t, db.Update(func(*memTx) error { return nil }), errClosed)
}
