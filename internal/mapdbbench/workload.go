package mapdbbench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Owner is the owner every page of a Set belongs to.
const Owner = 1

// valuePool is the number of distinct values a Set hands out in its
// batches; they are reused round-robin so that making a batch costs
// little and the measured loop only applies them.
const valuePool = 1 << 16

// buildChunk is the number of pages per transaction when a Set fills its
// replicas.
const buildChunk = 1 << 16

// Set is the map of one volume replicated on several devices: one replica
// of Kind per directory, all holding pages 0..N-1 of Owner.
type Set struct {
	Kind   Kind
	Layout Layout
	N      int
	Dirs   []string
	Reps   []Replica

	// BuildTime is the time taken to fill the replicas, in parallel.
	BuildTime time.Duration
	// Goroutines is how many goroutines opening the replicas added.
	Goroutines int

	rng    *rand.Rand
	pool   [][]byte
	next   int      // next value of pool to hand out
	perm   []uint32 // page indexes, partially shuffled per random batch
	cursor int      // next page of a sequential batch
}

// NewSet fills replicas replicas of kind, in base/r0 ... base/r{replicas-1},
// with n pages of layout, all in parallel as the store would, then
// closes and opens them again.
//
// Each replica is written by its database rather than copied from the
// first: on Linux 6.16+ ext4 caches a copied file in large folios, and
// dirtying 4 KiB of one then counts the whole folio in /proc/self/io.
func NewSet(kind Kind, layout Layout, n, replicas int, base string, seed uint64) (*Set, error) {
	s := &Set{Kind: kind, Layout: layout, N: n, rng: newRand(seed)}
	for i := range replicas {
		s.Dirs = append(s.Dirs, filepath.Join(base, fmt.Sprintf("r%d", i)))
	}
	for _, d := range s.Dirs {
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
	}
	head := uint64(0)
	for range valuePool {
		s.pool = append(s.pool, makeValue(layout, s.rng, head))
		head += SectorsPerPage
	}
	s.perm = make([]uint32, n)
	for i := range s.perm {
		s.perm[i] = uint32(i)
	}

	start := time.Now()
	if err := s.OpenAll(); err != nil {
		return nil, err
	}
	for lo := 0; lo < n; lo += buildChunk {
		b := &Batch{}
		for p := lo; p < min(n, lo+buildChunk); p++ {
			b.Keys = append(b.Keys, Key(Owner, uint64(p)))
			b.Vals = append(b.Vals, makeValue(layout, s.rng, head))
			head += SectorsPerPage
		}
		if err := s.Apply(b, replicas); err != nil {
			s.Close()
			return nil, err
		}
	}
	for _, r := range s.Reps {
		if err := Flush(r); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.Quiesce(); err != nil {
		s.Close()
		return nil, err
	}
	s.BuildTime = time.Since(start)
	if err := s.Close(); err != nil {
		return nil, err
	}
	return s, s.OpenAll()
}

// OpenAll opens every replica of the set.
func (s *Set) OpenAll() error {
	g := runtime.NumGoroutine()
	for _, d := range s.Dirs {
		r, err := Open(s.Kind, d)
		if err != nil {
			s.Close()
			return err
		}
		s.Reps = append(s.Reps, r)
	}
	s.Goroutines = runtime.NumGoroutine() - g
	return nil
}

// Close closes the open replicas.
func (s *Set) Close() error {
	var errs []error
	for _, r := range s.Reps {
		errs = append(errs, r.Close())
	}
	s.Reps = nil
	return errors.Join(errs...)
}

// Remove deletes the replicas' directories, and their parent if that
// leaves it empty.
func (s *Set) Remove() error {
	var errs []error
	for _, d := range s.Dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	if len(s.Dirs) > 0 {
		os.Remove(filepath.Dir(s.Dirs[0])) // fails if not empty: fine
	}
	return errors.Join(errs...)
}

// LogicalBytes is the size of the map's keys and values.
func (s *Set) LogicalBytes() int64 {
	return int64(s.N) * int64(KeySize+ValueSize(s.Layout.Runs()))
}

// NextBatch makes the next checkpoint of size pages: for the random
// layout, pages drawn uniformly without repetition among the N; for the
// sequential layout, the next size consecutive pages (from page 0 again
// once the end is reached). Keys are sorted.
func (s *Set) NextBatch(size int) *Batch {
	size = min(size, s.N)
	idx := make([]uint32, 0, size)
	if s.Layout == Random {
		for i := range size {
			j := i + s.rng.IntN(s.N-i)
			s.perm[i], s.perm[j] = s.perm[j], s.perm[i]
			idx = append(idx, s.perm[i])
		}
		slices.Sort(idx)
	} else {
		if s.cursor+size > s.N {
			s.cursor = 0
		}
		for i := range size {
			idx = append(idx, uint32(s.cursor+i))
		}
		s.cursor += size
	}
	b := &Batch{Keys: make([][]byte, size), Vals: make([][]byte, size)}
	for i, p := range idx {
		b.Keys[i] = Key(Owner, uint64(p))
		b.Vals[i] = s.pool[s.next]
		s.next = (s.next + 1) % len(s.pool)
	}
	return b
}

// Apply applies b to the first replicas replicas, one goroutine each, and
// returns when all are durable.
func (s *Set) Apply(b *Batch, replicas int) error {
	if replicas == 1 {
		return s.Reps[0].Apply(b)
	}
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i, r := range s.Reps[:replicas] {
		wg.Go(func() { errs[i] = r.Apply(b) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Quiesce waits for the background work of every replica.
func (s *Set) Quiesce() error {
	var errs []error
	for _, r := range s.Reps {
		errs = append(errs, r.Quiesce(5*time.Minute))
	}
	return errors.Join(errs...)
}

// Series is the measurement of a series of checkpoints.
type Series struct {
	Replicas int
	Keys     int             // pages over all batches (per replica)
	Times    []time.Duration // wall time of each batch, all replicas durable
	Wall     time.Duration   // sum of Times

	// While the batches ran: bytes the process handed to write system
	// calls (/proc/self/io wchar: both databases write with write/pwrite
	// and fsync, never through a mapping, so all of it reaches the disk),
	// bytes it dirtied in the page cache (write_bytes), bytes written to
	// the disk's block device by everyone (journal included), and user
	// plus system CPU.
	WChar int64
	Write int64
	Disk  int64
	CPU   time.Duration

	// The same for the background work left running at the end of the
	// series (pebble's flushes and compactions), until it stopped.
	DrainWChar int64
	DrainWrite int64
	DrainDisk  int64
	DrainCPU   time.Duration
	DrainTime  time.Duration

	// End is the first replica's disk usage at the end of the series,
	// before the background work was waited for.
	End Usage
}

// counters is a snapshot of what Series measures.
type counters struct {
	proc, disk IOCounters
	cpu        time.Duration
}

func (s *Set) counters() (counters, error) {
	var c counters
	var err1, err2 error
	c.proc, err1 = ReadIO()
	c.disk, err2 = DiskCounters(s.Dirs[0])
	c.cpu = CPUTime()
	return c, errors.Join(err1, err2)
}

// Measure applies batches to replicas replicas back to back and measures
// them. The background work of earlier writes is waited for first, so
// it is not charged to these batches.
func (s *Set) Measure(batches []*Batch, replicas int) (Series, error) {
	if err := s.Quiesce(); err != nil {
		return Series{}, err
	}
	r := Series{Replicas: replicas}
	c0, err := s.counters()
	if err != nil {
		return r, err
	}
	for _, b := range batches {
		t := time.Now()
		if err := s.Apply(b, replicas); err != nil {
			return r, err
		}
		d := time.Since(t)
		r.Times = append(r.Times, d)
		r.Wall += d
		r.Keys += b.Len()
	}
	c1, err := s.counters()
	if err != nil {
		return r, err
	}
	r.WChar, r.Write, r.Disk, r.CPU = c1.proc.WChar-c0.proc.WChar, c1.proc.Write-c0.proc.Write, c1.disk.Write-c0.disk.Write, c1.cpu-c0.cpu
	if r.End, err = DirUsage(s.Dirs[0]); err != nil {
		return r, err
	}
	t := time.Now()
	if err := s.Quiesce(); err != nil {
		return r, err
	}
	r.DrainTime = time.Since(t)
	c2, err := s.counters()
	if err != nil {
		return r, err
	}
	r.DrainWChar, r.DrainWrite, r.DrainDisk, r.DrainCPU = c2.proc.WChar-c1.proc.WChar, c2.proc.Write-c1.proc.Write, c2.disk.Write-c1.disk.Write, c2.cpu-c1.cpu
	return r, nil
}

// MeanBatch is the mean wall time of a batch.
func (r Series) MeanBatch() time.Duration { return r.Wall / time.Duration(len(r.Times)) }

// Percentile is the p-th percentile (0-100) of the batch times.
func (r Series) Percentile(p float64) time.Duration {
	t := slices.Clone(r.Times)
	slices.Sort(t)
	i := int(float64(len(t))*p/100+0.5) - 1
	return t[max(0, min(len(t)-1, i))]
}

// Load is the measurement of reading a whole replica once.
type Load struct {
	Pages   int
	Open    time.Duration // opening the database
	Iterate time.Duration // iterating and checking every page
	Read    int64         // bytes read from storage by open and iterate (/proc/self/io)
	Disk    int64         // bytes read from the disk's block device meanwhile
	CPU     time.Duration
}

// MeasureLoad opens the replica in dir, iterates every page, checking its
// value as Open would before adding it to the in-memory map, and closes
// it. With cold set, the files' pages are dropped from the page cache
// first.
func MeasureLoad(kind Kind, dir string, cold bool) (Load, error) {
	var l Load
	if cold {
		if err := DropCache(dir); err != nil {
			return l, err
		}
	}
	io0, err := ReadIO()
	if err != nil {
		return l, err
	}
	d0, err := DiskCounters(dir)
	if err != nil {
		return l, err
	}
	cpu0 := CPUTime()
	t := time.Now()
	r, err := Open(kind, dir)
	if err != nil {
		return l, err
	}
	l.Open = time.Since(t)
	t = time.Now()
	bad := 0
	l.Pages, err = r.Load(func(k, v []byte) {
		if _, ok := CheckValue(v); !ok || len(k) != KeySize {
			bad++
		}
	})
	l.Iterate = time.Since(t)
	l.CPU = CPUTime() - cpu0
	io1, ioErr := ReadIO()
	d1, diskErr := DiskCounters(dir)
	l.Read, l.Disk = io1.Read-io0.Read, d1.Read-d0.Read
	if err := errors.Join(err, ioErr, diskErr, r.Close()); err != nil {
		return l, err
	}
	if bad > 0 {
		return l, fmt.Errorf("%s %s: %d bad pages", kind, dir, bad)
	}
	return l, nil
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6d6170)) }
