package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "4k": 4096, "64KiB": 64 << 10, "1MiB": 1 << 20, "512MiB": 512 << 20,
		"1GiB": 1 << 30, "2G": 2 << 30, "1MB": 1e6, " 8 KiB ": 8 << 10, "0": 0,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "MiB", "1XB", "-1", "1.5GiB", "99999999999999999999", "9000000000T"} {
		_, err := parseSize(bad)
		assert.Error(t, err, bad)
	}
}
