package chunkstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentUse runs writers, readers, chunk users, syncs, scrubs and
// repair passes at once (meant for -race), then checks every byte.
func TestConcurrentUse(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 4096, WithOverProvision(0.1))...)
	const writers, region = 3, 256 << 10
	v, err := s.CreateVolume("vol", writers*region)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	models := make([][]byte, writers)
	for w := range writers {
		models[w] = make([]byte, region)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			base := int64(w * region)
			for i := range 150 {
				off := r.Int64N(region)
				n := 1 + r.Int64N(min(region-off, 40000))
				p := randBytes(r, int(n))
				var flags WriteFlags
				if i%37 == 0 {
					flags = FUA
				}
				if _, err := v.WriteAtFlags(p, base+off, flags); err != nil {
					errs <- err
					return
				}
				copy(models[w][off:], p)
				got := make([]byte, n)
				if _, err := v.ReadAt(got, base+off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, got) {
					at := 0
					for p[at] == got[at] {
						at++
					}
					errs <- fmt.Errorf("writer %d: read-after-write of %d bytes at %d differs in volume sector %d", w, n, base+off, (base+off+int64(at))/SectorSize)
					return
				}
				if i%25 == 0 {
					if err := v.Discard(base+off, n/2); err != nil {
						errs <- err
						return
					}
					clear(models[w][off : off+n/2])
				}
			}
		}()
	}
	var chunkMu sync.Mutex
	chunks := map[ChunkID][]byte{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(9, 9))
		ids := []ChunkID{NewChunkID(), NewChunkID(), NewChunkID()}
		for i := range 60 {
			id := ids[i%len(ids)]
			data := randBytes(r, r.IntN(50000))
			if err := s.PutChunk(id, data, 0); err != nil {
				errs <- err
				return
			}
			got, err := s.GetChunk(id)
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(data, got) {
				errs <- fmt.Errorf("chunk %d differs", i)
				return
			}
			chunkMu.Lock()
			chunks[id] = data
			chunkMu.Unlock()
		}
	}()
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Sync(); err != nil {
				errs <- err
				return
			}
			if _, err := s.Scrub(context.Background(), ScrubOptions{}); err != nil {
				errs <- err
				return
			}
			if _, err := s.RepairQueued(context.Background(), ScrubOptions{}); err != nil {
				errs <- err
				return
			}
			_ = s.Info()
			_ = s.Stats()
			_ = s.Volumes()
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	s = mustOpen(t, td)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	for w, model := range models {
		got := make([]byte, region)
		_, err := v.ReadAt(got, int64(w*region))
		require.NoError(t, err)
		require.True(t, bytes.Equal(model, got), "region %d", w)
	}
	for id, want := range chunks {
		got, err := s.GetChunk(id)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got))
	}
	requireClean(t, s)
	assert.Zero(t, s.Stats().Reconstructions)
	require.NoError(t, s.Close())
}
