package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkServerRead is the server's share of a 4 KiB read: the inode
// from bbolt and a sector from the chunkstore (in-memory devices, so no
// device time), without any transport.
func BenchmarkServerRead(b *testing.B) {
	s := newServer(b, Options{})
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(b, err)
	_, err = s.write(rootCred, f.Ino, 0, make([]byte, 4<<20), false)
	require.NoError(b, err)
	buf := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		if _, err := s.read(rootCred, f.Ino, off, buf); err != nil {
			b.Fatal(err)
		}
		off = (off + 4096*37) % (4 << 20)
	}
	require.NoError(b, s.release(f.Ino, h))
}
