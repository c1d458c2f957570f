package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MemFS is an in-memory FS that can crash. Each file keeps two images:
// what was written, and what was last synced. Each directory keeps two
// entry tables: the current one and the one as of its last SyncDir.
// Crash returns the FS as a machine would find it after a power loss:
// only synced file data, reachable through synced directory entries.
//
// A CrashClock shared by several MemFS makes them crash together after a
// chosen number of operations, so a test can crash a multi-device store at
// any point of its work. Vanish makes a device disappear: every later
// operation fails with ErrVanished.
type MemFS struct {
	// mu guards root, every directory and file reachable from it, and
	// state. Each operation holds it from the crash check to the end, so
	// an operation either happens wholly before a crash or not at all. It
	// is the only lock of the FS; no other lock is taken while it is held
	// except CrashClock.mu (order: MemFS.mu, then CrashClock.mu).
	mu    sync.Mutex
	root  *memDir
	state memState

	clock *CrashClock // nil: never crashes by clock
	host  string      // directory for HostPath; "" = unsupported
	name  string

	// disk is the disk the FS is on (SharedFlush): its clock's when it
	// has one, so that every FS of a clock shares one disk cache; its own
	// otherwise. flushing holds the files with bytes written back and not
	// yet flushed.
	disk     uint64
	flushing map[*memFile]struct{}
}

// diskIDs numbers the simulated disks.
var diskIDs atomic.Uint64

var _ FS = (*MemFS)(nil)

type memState uint8

const (
	memLive memState = iota
	memCrashed
	memVanished
)

// MemOption configures a MemFS.
type MemOption func(*MemFS)

// WithCrashClock attaches the FS to a clock; the FS crashes when the clock
// runs out. One clock may drive several FS.
func WithCrashClock(c *CrashClock) MemOption { return func(m *MemFS) { m.clock = c } }

// WithHostDir gives HostPath a directory on the host. Files there live
// beside the in-memory FS and outlive its simulated crashes as the host
// has them: use it for libraries that need an *os.File and that make
// their own commits durable and atomic (bbolt).
func WithHostDir(dir string) MemOption { return func(m *MemFS) { m.host = dir } }

// WithName sets the name String returns.
func WithName(name string) MemOption { return func(m *MemFS) { m.name = name } }

// NewMem returns an empty in-memory FS.
func NewMem(opts ...MemOption) *MemFS {
	m := &MemFS{root: newMemDir(), name: "mem"}
	for _, o := range opts {
		o(m)
	}
	m.join()
	return m
}

// join puts a new FS on its disk.
func (m *MemFS) join() {
	m.flushing = map[*memFile]struct{}{}
	if m.clock == nil {
		m.disk = diskIDs.Add(1)
		return
	}
	m.clock.mu.Lock()
	defer m.clock.mu.Unlock()
	m.disk = m.clock.disk
	m.clock.members = append(m.clock.members, m)
}

type memNode interface{ isNode() }

type memFile struct {
	data   []byte
	synced []byte
	// dirtyLo, dirtyHi bound the bytes written since the last Sync.
	dirtyLo, dirtyHi int64
	modTime          time.Time

	// SharedFlush's model, by pages of memPage bytes: alloc marks the
	// pages a Sync made durable after they were written (allocated
	// blocks), written those written since the last Sync, and ondev holds
	// the allocated pages WriteBack put on the device, which the next
	// flush of the disk makes durable.
	alloc, written []uint64
	ondev          map[int64][]byte
}

// memPage is the block size of MemFS's allocation model.
const memPage = 4096

func setBits(bm *[]uint64, lo, hi int64) {
	for p := lo; p < hi; p++ {
		w := int(p / 64)
		for len(*bm) <= w {
			*bm = append(*bm, 0)
		}
		(*bm)[w] |= 1 << (p % 64)
	}
}

func hasBit(bm []uint64, p int64) bool {
	w := int(p / 64)
	return w < len(bm) && bm[w]&(1<<(p%64)) != 0
}

func clearBit(bm []uint64, p int64) {
	if w := int(p / 64); w < len(bm) {
		bm[w] &^= 1 << (p % 64)
	}
}

// clearFrom clears the bits of pages p and above.
func clearFrom(bm []uint64, p int64) []uint64 {
	w := int(p / 64)
	if w >= len(bm) {
		return bm
	}
	bm[w] &= 1<<(p%64) - 1
	return bm[:w+1]
}

type memDir struct {
	entries map[string]memNode
	synced  map[string]memNode
}

func (*memFile) isNode() {}
func (*memDir) isNode()  {}

func newMemDir() *memDir {
	return &memDir{entries: map[string]memNode{}, synced: map[string]memNode{}}
}

// CrashClock counts the operations of the MemFS attached to it and crashes
// them all when a limit is reached.
type CrashClock struct {
	// mu guards the fields below. Taken with a MemFS.mu held.
	mu      sync.Mutex
	ops     int64
	limit   int64 // crash when ops reaches limit; < 0: never
	crashed bool
	disk    uint64   // the disk its FS share
	members []*MemFS // the FS on that disk
}

// NewCrashClock returns a clock that does not crash until CrashAfter or
// Crash is called.
func NewCrashClock() *CrashClock { return &CrashClock{limit: -1, disk: diskIDs.Add(1)} }

// CrashAfter arms the clock: the operation that would be the n-th from now
// (n ≥ 0) fails, and so does everything after it.
func (c *CrashClock) CrashAfter(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = c.ops + n
}

// Crash crashes the clock now.
func (c *CrashClock) Crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashed = true
}

// Crashed reports whether the clock has run out.
func (c *CrashClock) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

// Ops returns the number of operations counted.
func (c *CrashClock) Ops() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// tick counts one operation; false means the clock has crashed.
func (c *CrashClock) tick() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return false
	}
	if c.limit >= 0 && c.ops >= c.limit {
		c.crashed = true
		return false
	}
	c.ops++
	return true
}

// begin locks m and checks that an operation may run. On success the
// caller holds m.mu and must unlock it.
func (m *MemFS) begin() error {
	m.mu.Lock()
	switch m.state {
	case memVanished:
		m.mu.Unlock()
		return ErrVanished
	case memCrashed:
		m.mu.Unlock()
		return ErrCrashed
	}
	if m.clock != nil && !m.clock.tick() {
		m.state = memCrashed
		m.mu.Unlock()
		return ErrCrashed
	}
	return nil
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// lookup walks to the directory holding name. Caller holds m.mu.
func (m *MemFS) parent(name string) (*memDir, string, error) {
	c, err := clean(name)
	if err != nil {
		return nil, "", err
	}
	if c == "." {
		return nil, ".", nil
	}
	dir := m.root
	parts := strings.Split(c, "/")
	for _, p := range parts[:len(parts)-1] {
		n, ok := dir.entries[p]
		if !ok {
			return nil, "", fs.ErrNotExist
		}
		d, ok := n.(*memDir)
		if !ok {
			return nil, "", fmt.Errorf("%s: not a directory", p)
		}
		dir = d
	}
	return dir, parts[len(parts)-1], nil
}

func (m *MemFS) node(name string) (memNode, error) {
	d, base, err := m.parent(name)
	if err != nil {
		return nil, err
	}
	if base == "." {
		return m.root, nil
	}
	n, ok := d.entries[base]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return n, nil
}

// OpenFile implements FS.
func (m *MemFS) OpenFile(name string, flag int) (File, error) {
	if err := m.begin(); err != nil {
		return nil, pathErr("open", name, err)
	}
	defer m.mu.Unlock()
	d, base, err := m.parent(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if base == "." {
		return nil, pathErr("open", name, fs.ErrInvalid)
	}
	n, ok := d.entries[base]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, fs.ErrExist)
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, fs.ErrNotExist)
	case !ok:
		n = &memFile{modTime: time.Now()}
		d.entries[base] = n
	}
	f, isFile := n.(*memFile)
	if !isFile {
		return nil, pathErr("open", name, fmt.Errorf("is a directory"))
	}
	if flag&os.O_TRUNC != 0 {
		f.data = f.data[:0]
		f.markDirty(0, 0)
	}
	writable := flag&(os.O_WRONLY|os.O_RDWR) != 0
	return &memHandle{fs: m, f: f, name: name, writable: writable}, nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	if err := m.begin(); err != nil {
		return pathErr("rename", oldname, err)
	}
	defer m.mu.Unlock()
	od, ob, err := m.parent(oldname)
	if err != nil {
		return pathErr("rename", oldname, err)
	}
	nd, nb, err := m.parent(newname)
	if err != nil {
		return pathErr("rename", newname, err)
	}
	if ob == "." || nb == "." {
		return pathErr("rename", oldname, fs.ErrInvalid)
	}
	n, ok := od.entries[ob]
	if !ok {
		return pathErr("rename", oldname, fs.ErrNotExist)
	}
	delete(od.entries, ob)
	nd.entries[nb] = n
	return nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	if err := m.begin(); err != nil {
		return pathErr("remove", name, err)
	}
	defer m.mu.Unlock()
	d, base, err := m.parent(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n, ok := d.entries[base]
	if !ok || base == "." {
		return pathErr("remove", name, fs.ErrNotExist)
	}
	if sub, isDir := n.(*memDir); isDir && len(sub.entries) > 0 {
		return pathErr("remove", name, fmt.Errorf("directory not empty"))
	}
	delete(d.entries, base)
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string) error {
	if err := m.begin(); err != nil {
		return pathErr("mkdir", dir, err)
	}
	defer m.mu.Unlock()
	c, err := clean(dir)
	if err != nil {
		return err
	}
	if c == "." {
		return nil
	}
	d := m.root
	for _, p := range strings.Split(c, "/") {
		n, ok := d.entries[p]
		if !ok {
			nd := newMemDir()
			d.entries[p] = nd
			d = nd
			continue
		}
		sub, isDir := n.(*memDir)
		if !isDir {
			return pathErr("mkdir", dir, fmt.Errorf("%s: not a directory", p))
		}
		d = sub
	}
	return nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	if err := m.begin(); err != nil {
		return pathErr("syncdir", dir, err)
	}
	defer m.mu.Unlock()
	n, err := m.node(dir)
	if err != nil {
		return pathErr("syncdir", dir, err)
	}
	d, ok := n.(*memDir)
	if !ok {
		return pathErr("syncdir", dir, fmt.Errorf("not a directory"))
	}
	d.synced = make(map[string]memNode, len(d.entries))
	for k, v := range d.entries {
		d.synced[k] = v
	}
	return nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (fs.FileInfo, error) {
	if err := m.begin(); err != nil {
		return nil, pathErr("stat", name, err)
	}
	defer m.mu.Unlock()
	n, err := m.node(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return infoOf(path.Base(name), n), nil
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	if err := m.begin(); err != nil {
		return nil, pathErr("list", dir, err)
	}
	defer m.mu.Unlock()
	n, err := m.node(dir)
	if err != nil {
		return nil, pathErr("list", dir, err)
	}
	d, ok := n.(*memDir)
	if !ok {
		return nil, pathErr("list", dir, fmt.Errorf("not a directory"))
	}
	names := make([]string, 0, len(d.entries))
	for k := range d.entries {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

// HostPath implements FS: a path under the host directory given with
// WithHostDir.
func (m *MemFS) HostPath(name string) (string, error) {
	if err := m.begin(); err != nil {
		return "", pathErr("hostpath", name, err)
	}
	defer m.mu.Unlock()
	if m.host == "" {
		return "", pathErr("hostpath", name, ErrNotSupported)
	}
	c, err := clean(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(m.host, filepath.FromSlash(c)), nil
}

// String implements FS.
func (m *MemFS) String() string { return m.name }

// Crash simulates a power loss: m and its open files fail from now on
// with ErrCrashed, and the returned FS holds what survived, namely synced
// data reachable through synced directory entries. The new FS keeps the
// host directory and name, has no clock, and takes opts (for example a
// new clock).
func (m *MemFS) Crash(opts ...MemOption) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == memLive {
		m.state = memCrashed
	}
	n := &MemFS{root: m.root.crashCopy(), host: m.host, name: m.name}
	for _, o := range opts {
		o(n)
	}
	n.join()
	return n
}

// Vanish makes the device disappear: every later operation of m and of its
// open files fails with ErrVanished.
func (m *MemFS) Vanish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = memVanished
}

func (d *memDir) crashCopy() *memDir {
	nd := newMemDir()
	for k, n := range d.synced {
		var c memNode
		switch n := n.(type) {
		case *memFile:
			c = &memFile{data: clone(n.synced), synced: clone(n.synced), modTime: n.modTime, alloc: clone64(n.alloc)}
		case *memDir:
			c = n.crashCopy()
		}
		nd.entries[k] = c
		nd.synced[k] = c
	}
	return nd
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func clone64(b []uint64) []uint64 { return append([]uint64(nil), b...) }

func (f *memFile) markDirty(lo, hi int64) {
	if f.dirtyLo == f.dirtyHi {
		f.dirtyLo, f.dirtyHi = lo, hi
		if lo == hi { // a size change with no bytes: still dirty
			f.dirtyHi = lo + 1
		}
		return
	}
	f.dirtyLo = min(f.dirtyLo, lo)
	f.dirtyHi = max(f.dirtyHi, hi)
}

func (f *memFile) sync() {
	n := int64(len(f.data))
	if int64(len(f.synced)) > n {
		f.synced = f.synced[:n]
	} else if int64(len(f.synced)) < n {
		f.synced = append(f.synced, make([]byte, n-int64(len(f.synced)))...)
	}
	lo, hi := min(f.dirtyLo, n), min(f.dirtyHi, n)
	copy(f.synced[lo:hi], f.data[lo:hi])
	f.dirtyLo, f.dirtyHi = 0, 0
	// Blocks written are allocated now, up to the size (a partial last
	// page too: its block exists).
	last := (n + memPage - 1) / memPage
	for w, bits := range f.written {
		for b := range 64 {
			if bits&(1<<b) != 0 && int64(w*64+b) < last {
				setBits(&f.alloc, int64(w*64+b), int64(w*64+b)+1)
			}
		}
	}
	f.written = f.written[:0]
	f.alloc = clearFrom(f.alloc, last)
	f.ondev = nil
}

// writeBack records the allocated pages among the dirty bytes as on the
// device. Caller holds the FS's mu.
func (f *memFile) writeBack() bool {
	if f.dirtyLo == f.dirtyHi {
		return false
	}
	n := int64(len(f.data))
	any := false
	for p := f.dirtyLo / memPage; p*memPage < min(f.dirtyHi, n); p++ {
		if !hasBit(f.alloc, p) {
			continue
		}
		if f.ondev == nil {
			f.ondev = map[int64][]byte{}
		}
		f.ondev[p] = clone(f.data[p*memPage : min((p+1)*memPage, n)])
		any = true
	}
	return any
}

// flushed makes the pages on the device durable: the disk's cache was
// flushed. Caller holds the FS's mu.
func (f *memFile) flushed() {
	for p, b := range f.ondev {
		if off := p * memPage; off+int64(len(b)) <= int64(len(f.synced)) {
			copy(f.synced[off:], b)
		}
	}
	f.ondev = nil
}

// memHandle is an open MemFS file.
type memHandle struct {
	fs       *MemFS
	f        *memFile
	name     string
	writable bool
	closed   atomic.Bool
}

func (h *memHandle) begin(op string) error {
	if h.closed.Load() {
		return pathErr(op, h.name, ErrClosed)
	}
	if err := h.fs.begin(); err != nil {
		return pathErr(op, h.name, err)
	}
	return nil
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	if err := h.begin("read"); err != nil {
		return 0, err
	}
	defer h.fs.mu.Unlock()
	return h.readAt(p, off)
}

// readAt reads with h.fs.mu held.
func (h *memHandle) readAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, pathErr("read", h.name, fs.ErrInvalid)
	}
	if off >= int64(len(h.f.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) WriteAt(p []byte, off int64) (int, error) {
	if err := h.begin("write"); err != nil {
		return 0, err
	}
	defer h.fs.mu.Unlock()
	return h.writeAt(p, off)
}

// ReadAtv is one operation: atomic with respect to a crash.
func (h *memHandle) ReadAtv(bufs [][]byte, off int64) (int, error) {
	if err := h.begin("read"); err != nil {
		return 0, err
	}
	defer h.fs.mu.Unlock()
	return ReadAtvLoop(readerAtFunc(h.readAt), bufs, off)
}

// ReadAtvNowait is ReadAtv: memory never waits.
func (h *memHandle) ReadAtvNowait(bufs [][]byte, off int64) (int, error) {
	return h.ReadAtv(bufs, off)
}

// WriteAtv is one operation: atomic with respect to a crash.
func (h *memHandle) WriteAtv(bufs [][]byte, off int64) (int, error) {
	if err := h.begin("write"); err != nil {
		return 0, err
	}
	defer h.fs.mu.Unlock()
	return WriteAtvLoop(writerAtFunc(h.writeAt), bufs, off)
}

type readerAtFunc func([]byte, int64) (int, error)

func (f readerAtFunc) ReadAt(p []byte, off int64) (int, error) { return f(p, off) }

type writerAtFunc func([]byte, int64) (int, error)

func (f writerAtFunc) WriteAt(p []byte, off int64) (int, error) { return f(p, off) }

// writeAt writes with h.fs.mu held.
func (h *memHandle) writeAt(p []byte, off int64) (int, error) {
	if !h.writable {
		return 0, pathErr("write", h.name, fs.ErrPermission)
	}
	if off < 0 {
		return 0, pathErr("write", h.name, fs.ErrInvalid)
	}
	end := off + int64(len(p))
	if end > int64(len(h.f.data)) {
		if end > int64(cap(h.f.data)) {
			nd := make([]byte, end, max(end, 2*int64(cap(h.f.data))))
			copy(nd, h.f.data)
			h.f.data = nd
		} else {
			old := len(h.f.data)
			h.f.data = h.f.data[:end]
			clear(h.f.data[old:])
		}
	}
	copy(h.f.data[off:], p)
	h.f.markDirty(off, end)
	if len(p) > 0 {
		setBits(&h.f.written, off/memPage, (end+memPage-1)/memPage)
	}
	h.f.modTime = time.Now()
	return len(p), nil
}

// Sync syncs the file and flushes its disk: bytes written back over
// allocated pages of every file of every FS on the disk become durable
// (SharedFlush). It fails if an FS on the disk has crashed meanwhile.
func (h *memHandle) Sync() error {
	if err := h.begin("sync"); err != nil {
		return err
	}
	h.f.sync()
	delete(h.fs.flushing, h.f)
	h.fs.mu.Unlock()
	members := []*MemFS{h.fs}
	if c := h.fs.clock; c != nil {
		c.mu.Lock()
		members = append([]*MemFS(nil), c.members...)
		c.mu.Unlock()
	}
	lost := false
	for _, m := range members {
		m.mu.Lock()
		// A flush after the clock ran out did not happen.
		if m.state == memLive && (m.clock == nil || !m.clock.Crashed()) {
			for f := range m.flushing {
				f.flushed()
			}
			clear(m.flushing)
		} else if len(m.flushing) > 0 {
			lost = true
		}
		m.mu.Unlock()
	}
	if lost {
		return pathErr("sync", h.name, ErrCrashed)
	}
	return nil
}

// Disk implements SharedFlush: every FS of a CrashClock shares a disk,
// and MemFS writes in place.
func (h *memHandle) Disk() (uint64, bool) { return h.fs.disk, true }

// WriteBack implements SharedFlush.
func (h *memHandle) WriteBack() error {
	if err := h.begin("writeback"); err != nil {
		return err
	}
	defer h.fs.mu.Unlock()
	if h.f.writeBack() {
		h.fs.flushing[h.f] = struct{}{}
	}
	return nil
}

// Punch implements Puncher: the range reads as zeros at once, and its
// pages are no longer allocated; a crash before the next Sync leaves
// what the range held when last synced.
func (h *memHandle) Punch(off, n int64) error {
	if err := h.begin("punch"); err != nil {
		return err
	}
	defer h.fs.mu.Unlock()
	if !h.writable {
		return pathErr("punch", h.name, fs.ErrPermission)
	}
	if off < 0 || n < 0 {
		return pathErr("punch", h.name, fs.ErrInvalid)
	}
	end := min(off+n, int64(len(h.f.data)))
	if off >= end {
		return nil
	}
	clear(h.f.data[off:end])
	h.f.markDirty(off, end)
	// Whole pages lose their blocks; a partial page at either end is
	// zeroed in place, as a write of zeros.
	lo, hi := (off+memPage-1)/memPage, end/memPage
	if off%memPage != 0 {
		setBits(&h.f.written, off/memPage, off/memPage+1)
	}
	if end%memPage != 0 {
		setBits(&h.f.written, end/memPage, end/memPage+1)
	}
	for p := lo; p < hi; p++ {
		clearBit(h.f.alloc, p)
		clearBit(h.f.written, p)
		delete(h.f.ondev, p)
	}
	return nil
}

// StartWriteBack implements SharedFlush: in the model only WriteBack puts
// bytes on the device.
func (h *memHandle) StartWriteBack() error {
	if err := h.begin("writeback"); err != nil {
		return err
	}
	h.fs.mu.Unlock()
	return nil
}

// Allocated implements SharedFlush.
func (h *memHandle) Allocated(fn func(off, n int64)) error {
	if err := h.begin("allocated"); err != nil {
		return err
	}
	defer h.fs.mu.Unlock()
	size := int64(len(h.f.data))
	var lo int64 = -1
	for p := int64(0); p*memPage < size; p++ {
		switch in := hasBit(h.f.alloc, p); {
		case in && lo < 0:
			lo = p * memPage
		case !in && lo >= 0:
			fn(lo, p*memPage-lo)
			lo = -1
		}
	}
	if lo >= 0 {
		fn(lo, size-lo)
	}
	return nil
}

func (h *memHandle) Stat() (fs.FileInfo, error) {
	if err := h.begin("stat"); err != nil {
		return nil, err
	}
	defer h.fs.mu.Unlock()
	return infoOf(path.Base(h.name), h.f), nil
}

func (h *memHandle) Truncate(size int64) error {
	if err := h.begin("truncate"); err != nil {
		return err
	}
	defer h.fs.mu.Unlock()
	if !h.writable {
		return pathErr("truncate", h.name, fs.ErrPermission)
	}
	if size < 0 {
		return pathErr("truncate", h.name, fs.ErrInvalid)
	}
	old := int64(len(h.f.data))
	if size <= old {
		h.f.data = h.f.data[:size]
		// The blocks past the end are gone, or will be at the next Sync.
		last := (size + memPage - 1) / memPage
		h.f.alloc = clearFrom(h.f.alloc, last)
		h.f.written = clearFrom(h.f.written, last)
		for p := range h.f.ondev {
			if p >= last {
				delete(h.f.ondev, p)
			}
		}
	} else {
		h.f.data = append(h.f.data, make([]byte, size-old)...)
	}
	h.f.markDirty(min(old, size), max(old, size))
	return nil
}

// Close releases the handle. It does not count as an operation: closing a
// file after a crash or on a vanished device succeeds, as it does on a
// real file descriptor.
func (h *memHandle) Close() error {
	if h.closed.Swap(true) {
		return pathErr("close", h.name, ErrClosed)
	}
	return nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func infoOf(name string, n memNode) fs.FileInfo {
	switch n := n.(type) {
	case *memFile:
		return memInfo{name: name, size: int64(len(n.data)), mod: n.modTime}
	default:
		return memInfo{name: name, dir: true}
	}
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return i.mod }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
