package chunkstore

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOSFileModes: every file a store creates on a device directory (the
// shard file, meta.db, the identity record) is readable and writable by
// its owner only: the shards hold the volumes' data.
func TestOSFileModes(t *testing.T) {
	g := Geometry{Data: 2, Parity: 1}
	dirs := DeviceDirs(hostDir(t), g)
	s, err := CreateDirs(dirs, WithGeometry(g), WithStripeUnit(4096))
	require.NoError(t, err)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAt(make([]byte, 64<<10), 0)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, dir := range dirs {
		seen := map[string]bool{}
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			info, err := d.Info()
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), p)
			seen[d.Name()] = true
			return nil
		}))
		for _, name := range []string{shardFile, metaFile, identityFile} {
			assert.True(t, seen[name], "%s in %s", name, dir)
		}
	}
}
