package vfs

import (
	"io/fs"
	"os"
	"path"
	"sync"
	"sync/atomic"
)

// InjectFS wraps an FS and fails chosen operations: by kind, by name
// pattern, after a number of matching operations, a number of times. It
// also counts every operation by kind and device, so a test can check
// which devices a read touched.
type InjectFS struct {
	inner FS

	// mu guards rules and each rule's counters. It is never held while
	// calling inner.
	mu    sync.Mutex
	rules []*Rule

	counts [numOps]atomic.Int64
}

var _ FS = (*InjectFS)(nil)

// Rule says which operations fail. The zero Rule fails everything with
// ErrInjected.
type Rule struct {
	// Ops are the kinds of operation the rule applies to; none means all.
	Ops []Op
	// Path is a path.Match pattern for the name ("shards*"); "" matches
	// every name.
	Path string
	// After lets this many matching operations succeed first.
	After int64
	// Times is how many operations fail once the rule fires; 0 is forever.
	Times int64
	// Err is the error returned, wrapped in *os.PathError; nil means
	// ErrInjected. Use syscall.ENOSPC or syscall.EIO for host errors.
	Err error
	// Torn makes a failing WriteAt first write the first half of its
	// buffer, as a device that fills up mid-write does.
	Torn bool

	seen, fired int64 // guarded by InjectFS.mu
}

// NewInjectFS wraps inner. With no rules it passes everything through.
func NewInjectFS(inner FS) *InjectFS { return &InjectFS{inner: inner} }

// Inject adds a rule and returns a function that removes it.
func (f *InjectFS) Inject(r Rule) (remove func()) {
	rp := &r
	f.mu.Lock()
	f.rules = append(f.rules, rp)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.rules {
			if x == rp {
				f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
				return
			}
		}
	}
}

// Clear removes every rule.
func (f *InjectFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count returns how many operations of a kind were attempted.
func (f *InjectFS) Count(op Op) int64 { return f.counts[op].Load() }

// ResetCounts zeroes the counters.
func (f *InjectFS) ResetCounts() {
	for i := range f.counts {
		f.counts[i].Store(0)
	}
}

// Inner returns the wrapped FS.
func (f *InjectFS) Inner() FS { return f.inner }

func (r *Rule) matches(op Op, name string) bool {
	if len(r.Ops) > 0 {
		found := false
		for _, o := range r.Ops {
			if o == op {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if r.Path == "" {
		return true
	}
	ok, _ := path.Match(r.Path, path.Clean(name))
	return ok
}

// check counts op and returns the injected error, if any, and whether the
// rule asks for a torn write.
func (f *InjectFS) check(op Op, name string) (torn bool, err error) {
	f.counts[op].Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if !r.matches(op, name) {
			continue
		}
		r.seen++
		if r.seen <= r.After {
			continue
		}
		if r.Times > 0 && r.fired >= r.Times {
			continue
		}
		r.fired++
		err = r.Err
		if err == nil {
			err = ErrInjected
		}
		return r.Torn, &os.PathError{Op: op.String(), Path: name, Err: err}
	}
	return false, nil
}

// OpenFile implements FS.
func (f *InjectFS) OpenFile(name string, flag int) (File, error) {
	op := OpOpen
	if flag&os.O_CREATE != 0 {
		op = OpCreate
	}
	if _, err := f.check(op, name); err != nil {
		return nil, err
	}
	in, err := f.inner.OpenFile(name, flag)
	if err != nil {
		return nil, err
	}
	return &injectFile{fs: f, inner: in, name: name}, nil
}

// Rename implements FS.
func (f *InjectFS) Rename(oldname, newname string) error {
	if _, err := f.check(OpRename, oldname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

// Remove implements FS.
func (f *InjectFS) Remove(name string) error {
	if _, err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// MkdirAll implements FS.
func (f *InjectFS) MkdirAll(dir string) error {
	if _, err := f.check(OpMkdir, dir); err != nil {
		return err
	}
	return f.inner.MkdirAll(dir)
}

// SyncDir implements FS.
func (f *InjectFS) SyncDir(dir string) error {
	if _, err := f.check(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

// Stat implements FS.
func (f *InjectFS) Stat(name string) (fs.FileInfo, error) {
	if _, err := f.check(OpStat, name); err != nil {
		return nil, err
	}
	return f.inner.Stat(name)
}

// List implements FS.
func (f *InjectFS) List(dir string) ([]string, error) {
	if _, err := f.check(OpList, dir); err != nil {
		return nil, err
	}
	return f.inner.List(dir)
}

// HostPath implements FS.
func (f *InjectFS) HostPath(name string) (string, error) {
	if _, err := f.check(OpHostPath, name); err != nil {
		return "", err
	}
	return f.inner.HostPath(name)
}

// String implements FS.
func (f *InjectFS) String() string { return f.inner.String() }

type injectFile struct {
	fs    *InjectFS
	inner File
	name  string
}

func (h *injectFile) ReadAt(p []byte, off int64) (int, error) {
	if _, err := h.fs.check(OpRead, h.name); err != nil {
		return 0, err
	}
	return h.inner.ReadAt(p, off)
}

func (h *injectFile) WriteAt(p []byte, off int64) (int, error) {
	if torn, err := h.fs.check(OpWrite, h.name); err != nil {
		if torn && len(p) > 1 {
			n, _ := h.inner.WriteAt(p[:len(p)/2], off)
			return n, err
		}
		return 0, err
	}
	return h.inner.WriteAt(p, off)
}

// ReadAtv counts as one OpRead.
func (h *injectFile) ReadAtv(bufs [][]byte, off int64) (int, error) {
	if _, err := h.fs.check(OpRead, h.name); err != nil {
		return 0, err
	}
	return h.inner.ReadAtv(bufs, off)
}

// WriteAtv counts as one OpWrite; a torn one writes the first half of
// the bytes.
func (h *injectFile) WriteAtv(bufs [][]byte, off int64) (int, error) {
	if torn, err := h.fs.check(OpWrite, h.name); err != nil {
		if half := totalLen(bufs) / 2; torn && half > 0 {
			var cut [][]byte
			for _, b := range bufs {
				if half == 0 {
					break
				}
				k := min(len(b), half)
				cut = append(cut, b[:k])
				half -= k
			}
			n, _ := h.inner.WriteAtv(cut, off)
			return n, err
		}
		return 0, err
	}
	return h.inner.WriteAtv(bufs, off)
}

func (h *injectFile) Sync() error {
	if _, err := h.fs.check(OpSync, h.name); err != nil {
		return err
	}
	return h.inner.Sync()
}

func (h *injectFile) Stat() (fs.FileInfo, error) {
	if _, err := h.fs.check(OpFileStat, h.name); err != nil {
		return nil, err
	}
	return h.inner.Stat()
}

func (h *injectFile) Truncate(size int64) error {
	if _, err := h.fs.check(OpTruncate, h.name); err != nil {
		return err
	}
	return h.inner.Truncate(size)
}

func (h *injectFile) Close() error {
	if _, err := h.fs.check(OpClose, h.name); err != nil {
		_ = h.inner.Close()
		return err
	}
	return h.inner.Close()
}
