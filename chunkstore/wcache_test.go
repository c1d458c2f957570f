package chunkstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// withWriteCacheExpire sets how long a page may wait in the write cache.
func withWriteCacheExpire(d time.Duration) Option {
	return func(o *options) { o.wcExpire = d }
}

// newCached makes a 4+2 store on fresh test devices with a write cache of
// one slab and the given options, closed when the test ends, and its
// volume "v" of size bytes.
func newCached(t *testing.T, size int64, extra ...Option) (*testDevices, []Option, *Store, *Volume) {
	t.Helper()
	td := newTestDevices(t, 6)
	opts := testOpts(Geometry{4, 2}, 4096, append([]Option{WithWriteCache(1 << 20)}, extra...)...)
	s := mustCreate(t, td, opts...)
	t.Cleanup(func() { _ = s.Close() })
	v, err := s.CreateVolume("v", size)
	require.NoError(t, err)
	return td, opts, s, v
}

// reopen closes s, opens the store on td again (closed when the test
// ends) and returns it with its volume "v".
func reopen(t *testing.T, s *Store, td *testDevices, opts []Option) (*Store, *Volume) {
	t.Helper()
	require.NoError(t, s.Close())
	s = mustOpen(t, td, opts...)
	t.Cleanup(func() { _ = s.Close() })
	v, err := s.OpenVolume("v")
	require.NoError(t, err)
	return s, v
}

// noErrors closes errs and fails on any error in it.
func noErrors(t *testing.T, errs chan error) {
	t.Helper()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestWriteCacheModel runs random writes (page-aligned, unaligned and
// FUA), write-zeroes and discards against a volume with a write cache of
// one 2 MiB slab (smaller than the volume, so writes also find it full
// and bypass it), with Syncs between, and compares every read with a
// model of the bytes. After Close and Open the store holds the model
// exactly.
func TestWriteCacheModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x57a6e))
			const size = 4 << 20
			td, opts, s, v := newCached(t, size, withWriteCacheExpire(time.Duration(seed)*time.Millisecond))
			var err error
			model := make([]byte, size)
			for op := range 400 {
				off := r.Int64N(size)
				n := 1 + r.Int64N(min(size-off, 96<<10))
				if r.IntN(2) == 0 { // whole pages, which the cache takes
					off = off / SectorSize * SectorSize
					n = (n + SectorSize - 1) / SectorSize * SectorSize
					n = min(n, size-off)
				}
				switch k := r.IntN(20); {
				case k < 14:
					p := randBytes(r, int(n))
					var flags WriteFlags
					if k == 0 {
						flags = FUA
					}
					_, err := v.WriteAtFlags(p, off, flags)
					require.NoError(t, err)
					copy(model[off:], p)
				case k < 16:
					require.NoError(t, v.WriteZeroes(off, n, 0))
					clear(model[off : off+n])
				case k < 18:
					require.NoError(t, v.Discard(off, n))
					clear(model[off : off+n])
				case k < 19:
					require.NoError(t, v.Sync())
					require.Zero(t, s.Stats().WriteCacheBytes, "a Sync empties the cache")
				default:
					got := make([]byte, size)
					_, err := v.ReadAt(got, 0)
					require.NoError(t, err)
					require.True(t, bytes.Equal(model, got), "op %d: the whole volume", op)
				}
				lo := r.Int64N(size)
				got := make([]byte, 1+r.Int64N(min(size-lo, 200<<10)))
				_, err := v.ReadAt(got, lo)
				require.NoError(t, err)
				require.True(t, bytes.Equal(model[lo:lo+int64(len(got))], got), "op %d: read of %d at %d", op, len(got), lo)
			}
			st := s.Stats()
			require.Positive(t, st.WriteCacheDestaged, "the cache wrote something out")
			s, v = reopen(t, s, td, opts)
			got := make([]byte, size)
			_, err = v.ReadAt(got, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(model, got), "after Close and Open")
			requireClean(t, s)
		})
	}
}

// TestWriteCacheCoalesces: a page written many times between Syncs
// reaches the log once.
func TestWriteCacheCoalesces(t *testing.T) {
	_, _, s, v := newCached(t, 1<<20)
	var err error
	before := s.Stats()
	p := make([]byte, 2*SectorSize)
	for i := range 1000 {
		p[0] = byte(i)
		_, err := v.WriteAt(p, 8*SectorSize)
		require.NoError(t, err)
	}
	require.Equal(t, int64(len(p)), s.Stats().WriteCacheBytes)
	require.Equal(t, before.HostBytes, s.Stats().HostBytes, "nothing reached the log before the Sync")
	require.NoError(t, v.Sync())
	after := s.Stats()
	require.Equal(t, int64(len(p)), after.WriteCacheDestaged)
	require.Equal(t, before.HostBytes+int64(len(p)), after.HostBytes)
	got := make([]byte, len(p))
	_, err = v.ReadAt(got, 8*SectorSize)
	require.NoError(t, err)
	require.Equal(t, byte(999%256), got[0])
}

// TestWriteCacheDurability: after a crash, data synced (or written with
// FUA) is there, and data cached and not synced is either there or as
// before, never anything else; the volume's other pages are untouched.
func TestWriteCacheDurability(t *testing.T) {
	td, opts, s, v := newCached(t, 1<<20)
	var err error
	page := func(b byte) []byte { return bytes.Repeat([]byte{b}, SectorSize) }
	for pg := range 8 {
		_, err := v.WriteAt(page(1), int64(pg)*SectorSize)
		require.NoError(t, err)
	}
	require.NoError(t, v.Sync())
	_, err = v.WriteAt(page(2), 0)
	require.NoError(t, err)
	_, err = v.WriteAtFlags(page(3), SectorSize, FUA)
	require.NoError(t, err)
	_, err = v.WriteAt(page(4), 2*SectorSize) // cached, then a FUA of part of it
	require.NoError(t, err)
	_, err = v.WriteAtFlags([]byte{5, 5}, 2*SectorSize+100, FUA)
	require.NoError(t, err)
	require.NoError(t, v.Discard(3*SectorSize, SectorSize))
	require.NoError(t, v.Sync())
	_, err = v.WriteAt(page(6), 4*SectorSize) // cached, never synced
	require.NoError(t, err)
	_, err = v.WriteAt(page(7), 5*SectorSize)
	require.NoError(t, err)
	require.NoError(t, v.WriteZeroes(5*SectorSize, SectorSize, 0)) // its cached page takes the zeros
	got := make([]byte, SectorSize)
	_, err = v.ReadAt(got, 5*SectorSize)
	require.NoError(t, err)
	require.Equal(t, page(0), got)
	td.clock.Crash() // the power goes: Close writes nothing more
	_ = s.Close()
	td.crash()

	s = mustOpen(t, td, opts...)
	defer s.Close()
	v, err = s.OpenVolume("v")
	require.NoError(t, err)
	read := func(pg int) []byte {
		b := make([]byte, SectorSize)
		_, err := v.ReadAt(b, int64(pg)*SectorSize)
		require.NoError(t, err)
		return b
	}
	require.Equal(t, page(2), read(0))
	require.Equal(t, page(3), read(1))
	want := page(4)
	want[100], want[101] = 5, 5
	require.Equal(t, want, read(2))
	require.Equal(t, page(0), read(3))
	require.Contains(t, [][]byte{page(1), page(6)}, read(4))
	require.Contains(t, [][]byte{page(1), page(0)}, read(5))
	require.Equal(t, page(1), read(6))
	requireClean(t, s)
}

// TestWriteCacheExpires: cached pages reach the log by themselves after
// the expiry, with no Sync.
func TestWriteCacheExpires(t *testing.T) {
	_, _, s, v := newCached(t, 1<<20, withWriteCacheExpire(time.Millisecond))
	_, err := v.WriteAt(make([]byte, 3*SectorSize), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Stats().WriteCacheBytes == 0 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(3*SectorSize), s.Stats().WriteCacheDestaged)
}

// TestWriteCacheConcurrent: writers of interleaved pages, readers, Syncs
// and the destager all at once (run it with -race). Each writer owns
// every fourth page and checks its pages read back as it last wrote them;
// after Close the store holds every writer's last bytes.
func TestWriteCacheConcurrent(t *testing.T) {
	const pages, writers = 1024, 4
	td, opts, s, v := newCached(t, pages*SectorSize, withWriteCacheExpire(time.Millisecond))
	last := make([][]byte, pages)
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 300 {
				pg := int64(r.IntN(pages/writers)*writers + w)
				p := randBytes(r, SectorSize)
				var flags WriteFlags
				if i%17 == 0 {
					flags = FUA
				}
				if _, err := v.WriteAtFlags(p, pg*SectorSize, flags); err != nil {
					errs <- err
					return
				}
				last[pg] = p
				got := make([]byte, SectorSize)
				if _, err := v.ReadAt(got, pg*SectorSize); err != nil || !bytes.Equal(got, p) {
					errs <- fmt.Errorf("writer %d: page %d did not read back (%v)", w, pg, err)
					return
				}
				if i%50 == 0 {
					if err := v.Sync(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // whole-volume reads beside them
		defer wg.Done()
		buf := make([]byte, pages*SectorSize)
		for range 20 {
			if _, err := v.ReadAt(buf, 0); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	noErrors(t, errs)
	s, v = reopen(t, s, td, opts)
	for pg, p := range last {
		if p == nil {
			p = make([]byte, SectorSize)
		}
		got := make([]byte, SectorSize)
		_, err := v.ReadAt(got, int64(pg)*SectorSize)
		require.NoError(t, err)
		require.True(t, bytes.Equal(p, got), "page %d", pg)
	}
	requireClean(t, s)
}

// TestWriteCacheDeletedVolume: deleting a volume gives its cached pages
// back.
func TestWriteCacheDeletedVolume(t *testing.T) {
	_, _, s, v := newCached(t, 1<<20)
	_, err := v.WriteAt(make([]byte, 16*SectorSize), 0)
	require.NoError(t, err)
	require.NoError(t, s.DeleteVolume("v"))
	require.Zero(t, s.Stats().WriteCacheBytes)
	_, err = v.WriteAt(make([]byte, SectorSize), 0)
	require.ErrorIs(t, err, ErrClosed, "a write through the deleted volume's handle")
	require.False(t, v.wc.write(make([]byte, SectorSize), 0), "a write that raced the deletion caches nothing")
	require.Zero(t, s.Stats().WriteCacheBytes)
	require.NoError(t, s.Sync())
}

// TestWriteCacheQuiescent: four goroutines make random writes (whole
// pages, unaligned, FUA), write-zeroes, discards and Syncs on overlapping
// ranges of one volume, beside the destager under pressure. Whatever order
// they took effect in, once they are done the volume must read the same
// before Close and after Open: the cache and the log never disagree about
// which write came last.
func TestWriteCacheQuiescent(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			const size = 4 << 20
			td, opts, s, v := newCached(t, size, withWriteCacheExpire(time.Duration(seed)*time.Millisecond))
			var err error
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for w := range 4 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					for range 300 {
						off := r.Int64N(size)
						n := 1 + r.Int64N(min(size-off, 64<<10))
						if r.IntN(3) > 0 {
							off = off / SectorSize * SectorSize
							n = min((n+SectorSize-1)/SectorSize*SectorSize, size-off)
						}
						var err error
						switch k := r.IntN(20); {
						case k < 15:
							var flags WriteFlags
							if k == 0 {
								flags = FUA
							}
							_, err = v.WriteAtFlags(randBytes(r, int(n)), off, flags)
						case k < 17:
							err = v.WriteZeroes(off, n, 0)
						case k < 19:
							err = v.Discard(off, n)
						default:
							err = v.Sync()
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			noErrors(t, errs)
			before := make([]byte, size)
			_, err = v.ReadAt(before, 0)
			require.NoError(t, err)
			s, v = reopen(t, s, td, opts)
			after := make([]byte, size)
			_, err = v.ReadAt(after, 0)
			require.NoError(t, err)
			for i := 0; i < size; i += SectorSize {
				require.True(t, bytes.Equal(before[i:i+SectorSize], after[i:i+SectorSize]), "sector %d differs after Close and Open", i/SectorSize)
			}
			requireClean(t, s)
		})
	}
}

// TestWriteCacheDestageOrder: a FUA write of a page that a destage has
// taken but not yet written waits for that destage, so the destage's
// older copy can never land in the log after it. The destage is held
// between taking the page and writing it; the FUA write must not finish
// before it is let go, and the page reads as the FUA write left it, also
// after Close and Open.
func TestWriteCacheDestageOrder(t *testing.T) {
	td, opts, s, v := newCached(t, 1<<20)
	var err error
	old, fua := bytes.Repeat([]byte{1}, SectorSize), bytes.Repeat([]byte{2}, SectorSize)
	_, err = v.WriteAt(old, 0)
	require.NoError(t, err)

	taken, let := make(chan struct{}), make(chan struct{})
	testHookDestage = func() {
		close(taken)
		<-let
	}
	t.Cleanup(func() { testHookDestage = nil })
	synced := make(chan error, 1)
	go func() { synced <- v.Sync() }() // destages the page
	<-taken
	testHookDestage = nil
	wrote := make(chan error, 1)
	go func() {
		_, err := v.WriteAtFlags(fua, 0, FUA)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("the FUA write finished while a destage of its page was under way (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(let)
	require.NoError(t, <-synced)
	require.NoError(t, <-wrote)
	got := make([]byte, SectorSize)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, fua, got)
	_, v = reopen(t, s, td, opts)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, fua, got)
}
