package resstore

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reservations.db")
	s, err := Open(path)
	require.NoError(t, err)
	v, err := s.Load("nqn.a", 1)
	require.NoError(t, err)
	require.Nil(t, v)
	require.NoError(t, s.Save("nqn.a", 1, []byte("one")))
	require.NoError(t, s.Save("nqn.a", 2, []byte("two")))
	require.NoError(t, s.Save("nqn.b", 1, []byte("other")))
	require.NoError(t, s.Close())

	// Reopened: what was saved is there; nil deletes.
	s, err = Open(path)
	require.NoError(t, err)
	defer s.Close()
	v, err = s.Load("nqn.a", 1)
	require.NoError(t, err)
	require.Equal(t, []byte("one"), v)
	require.NoError(t, s.Save("nqn.a", 1, nil))
	v, err = s.Load("nqn.a", 1)
	require.NoError(t, err)
	require.Nil(t, v)
	v, err = s.Load("nqn.b", 1)
	require.NoError(t, err)
	require.Equal(t, []byte("other"), v)
	require.NoError(t, s.Save("nqn.c", 9, nil), "deleting what is not there")
}
