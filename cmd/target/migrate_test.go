package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
)

func TestMigrateCommand(t *testing.T) {
	data := t.TempDir()
	storetest.UntarV1(t, data)
	// Before: the store commands say in one line what to run.
	res := run("scrub", "--data", data)
	require.Error(t, res.err)
	msg := res.err.Error()
	assert.Equal(t, 1, res.code())
	assert.NotContains(t, msg, "\n", "one line")
	assert.Contains(t, msg, "format v1")
	assert.Contains(t, msg, "target migrate --data "+data)

	res = run("migrate", "--data", data)
	require.NoError(t, res.err, "%s", res.stderr)
	sum := res.summary(t, "migrate:")
	assert.EqualValues(t, 2, sum["volumes"])
	assert.EqualValues(t, 2, sum["chunks"])
	assert.EqualValues(t, storetest.V1Stripes, sum["stripes"])
	assert.Contains(t, res.stdout, "converted=true")

	s, err := chunkstore.OpenDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry))
	require.NoError(t, err)
	storetest.VerifyV1(t, s)
	require.NoError(t, s.Close())

	res = run("scrub", "--data", data)
	require.NoError(t, res.err)
	assert.EqualValues(t, storetest.V1Stripes, res.summary(t, "scrub:")["checked"])

	// Again: nothing to do.
	res = run("migrate", "--data", data)
	require.NoError(t, res.err)
	assert.Contains(t, res.stdout, "converted=false")
}

func TestMigrateInto(t *testing.T) {
	data, into := t.TempDir(), filepath.Join(t.TempDir(), "new")
	storetest.UntarV1(t, data)
	require.NoError(t, os.WriteFile(filepath.Join(data, "fs-files.db"), []byte("the file service's metadata"), 0o644))
	res := run("migrate", "--data", data, "--into", into)
	require.NoError(t, res.err, "%s", res.stderr)
	assert.Contains(t, res.stdout, "the store in "+into+" is format v2\n")
	assert.True(t, strings.HasPrefix(lastLine(res.stdout), "migrate: format=2 "), res.stdout)

	// The copy is v2, every file of DATA came along, DATA is still v1.
	s, err := chunkstore.OpenDirs(chunkstore.DeviceDirs(into, chunkstore.DefaultGeometry))
	require.NoError(t, err)
	storetest.VerifyV1(t, s)
	require.NoError(t, s.Close())
	b, err := os.ReadFile(filepath.Join(into, "fs-files.db"))
	require.NoError(t, err)
	assert.Equal(t, "the file service's metadata", string(b))
	_, err = chunkstore.OpenDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry))
	assert.ErrorIs(t, err, chunkstore.ErrFormatV1)

	res = run("migrate", "--data", data, "--into", data)
	assert.Equal(t, exitUsage, res.code())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
