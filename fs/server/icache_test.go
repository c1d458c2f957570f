package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// TestInodeCacheCoherent changes files in every way that touches an
// inode (writes inline and chunked, truncates, chmod, chown, links,
// unlinks, renames over, xattrs) while readers keep reading and stating
// them, filling the cache the whole time. After each change returns,
// what the cache answers must be what the database holds, and at the
// end every cached entry must match its record (checkInvariants).
func TestInodeCacheCoherent(t *testing.T) {
	for _, cacheBytes := range []int64{0, 4096} { // the default, and a tiny cache that evicts all the time
		t.Run(fmt.Sprint(cacheBytes), func(t *testing.T) {
			opt := testOptions()
			opt.CacheBytes = cacheBytes
			s := newServer(t, opt)
			const files = 6
			inos := make([]atomic.Uint64, files)
			names := func(i int) []byte { return []byte(fmt.Sprintf("f%d", i)) }
			for i := range files {
				a, h, err := s.create(rootCred, root, names(i), 0o644, 0, 0, 0)
				require.NoError(t, err)
				require.NoError(t, s.release(a.Ino, h))
				inos[i].Store(a.Ino)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for r := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), 3))
					buf := make([]byte, 3000)
					for {
						select {
						case <-stop:
							return
						default:
						}
						ino := inos[rng.IntN(files)].Load()
						if rng.IntN(2) == 0 {
							_, _ = s.getAttr(ino)
						} else {
							_, _ = s.read(rootCred, ino, rng.Int64N(20000), buf)
						}
					}
				}()
			}
			rng := rand.New(rand.NewPCG(9, 9))
			data := make([]byte, 20000)
			for i := range data {
				data[i] = byte(i*13 + 1)
			}
			for range 600 {
				i := rng.IntN(files)
				ino := inos[i].Load()
				var err error
				switch op := rng.IntN(9); op {
				case 0, 1:
					off := rng.Int64N(12000)
					_, err = s.write(rootCred, ino, off, data[:1+rng.IntN(4000)], false)
				case 2:
					_, err = s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetSize, Size: uint64(rng.IntN(12000))})
				case 3:
					_, err = s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetMode | proto.SetUID, Mode: uint32(rng.IntN(0o777)), UID: uint32(rng.IntN(3))})
				case 4:
					_, err = s.link(rootCred, ino, root, []byte(fmt.Sprintf("l%d", i)))
					if err == nil {
						err = s.unlink(rootCred, root, []byte(fmt.Sprintf("l%d", i)), false)
					}
				case 5: // replace file i by a new one renamed over it
					var a proto.Attr
					var h uint64
					a, h, err = s.create(rootCred, root, []byte("new"), 0o600, 0, 0, 0)
					require.NoError(t, err)
					_, err = s.write(rootCred, a.Ino, 0, data[:rng.IntN(600)], false)
					require.NoError(t, err)
					require.NoError(t, s.release(a.Ino, h))
					require.NoError(t, s.rename(rootCred, root, []byte("new"), root, names(i), 0))
					_, err = s.getAttr(ino)
					requireErrno(t, syscall.ENOENT, err, "the replaced file")
					inos[i].Store(a.Ino)
					ino, err = a.Ino, nil
				case 6:
					err = s.setXattr(rootCred, ino, []byte("user.x"), []byte("v"), 0)
				case 7:
					err = s.fallocate(rootCred, ino, proto.FallocPunch|proto.FallocKeep, rng.Int64N(8000), 1+rng.Int64N(8000))
				case 8:
					_, err = s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetMtime | proto.SetAtime, Mtime: rng.Int64(), Atime: 5})
				}
				require.NoError(t, err)
				// The change has returned: the cache shows it.
				got, err := s.getAttr(ino)
				require.NoError(t, err)
				n, err := s.viewInode(ino)
				require.NoError(t, err)
				require.Equal(t, s.attrOf(ino, n), got)
				want := make([]byte, n.Size)
				for off := int64(0); off < int64(n.Size); off += int64(opt.BlockSize) {
					k := min(int64(opt.BlockSize), int64(n.Size)-off)
					if n.inline() {
						require.NoError(t, s.db.View(func(tx *bboltTx) error {
							copy(want, tx.Bucket(bucketData).Get(inoKey(ino)))
							return nil
						}))
						break
					}
					require.NoError(t, s.readBlock(ino, off/int64(opt.BlockSize), want[off:off+k], 0))
				}
				got2 := make([]byte, n.Size+10)
				m, err := s.read(rootCred, ino, 0, got2)
				require.NoError(t, err)
				require.True(t, bytes.Equal(want, got2[:m]), "inode %d reads as the database says", ino)
			}
			close(stop)
			wg.Wait()
			checkInvariants(t, s)
		})
	}
}

// TestInodeCacheOff: with CacheBytes -1 nothing is cached, and the
// server works the same.
func TestInodeCacheOff(t *testing.T) {
	opt := testOptions()
	opt.CacheBytes = -1
	s := newServer(t, opt)
	a, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = s.write(rootCred, a.Ino, 0, []byte("hello"), false)
	require.NoError(t, err)
	buf := make([]byte, 10)
	n, err := s.read(rootCred, a.Ino, 0, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))
	require.NoError(t, s.release(a.Ino, h))
	s.icache.each(func(ino uint64, e *icacheEntry) { t.Errorf("inode %d cached", ino) })
}

// TestReadAllocatesNothing: a read of a cached inode, chunked or
// inline, allocates nothing in the server.
func TestReadAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := newServer(t, testOptions())
	big, h1, err := s.create(rootCred, root, []byte("big"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = s.write(rootCred, big.Ino, 0, make([]byte, 40000), false)
	require.NoError(t, err)
	small, h2, err := s.create(rootCred, root, []byte("small"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = s.write(rootCred, small.Ino, 0, make([]byte, 300), false)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	for _, ino := range []uint64{small.Ino, big.Ino} {
		_, err := s.read(rootCred, ino, 0, buf) // fills the cache
		require.NoError(t, err)
		_, err = s.getAttr(ino)
		require.NoError(t, err)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if _, err := s.read(rootCred, small.Ino, 0, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := s.getAttr(small.Ino); err != nil {
			t.Fatal(err)
		}
	}), "inline read and getattr")
	require.NoError(t, s.release(big.Ino, h1))
	require.NoError(t, s.release(small.Ino, h2))
}
