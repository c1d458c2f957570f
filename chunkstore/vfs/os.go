package vfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// OSFS is an FS rooted at a directory of the host's file system.
type OSFS struct {
	root string
}

var _ FS = (*OSFS)(nil)

// NewOS returns the FS rooted at dir. The directory need not exist yet:
// operations on a missing root fail with fs.ErrNotExist, which is how a
// device that has gone away looks.
func NewOS(dir string) *OSFS {
	return &OSFS{root: filepath.Clean(dir)}
}

func (o *OSFS) path(name string) (string, error) {
	c, err := clean(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(o.root, filepath.FromSlash(c)), nil
}

// OpenFile implements FS.
func (o *OSFS) OpenFile(name string, flag int) (File, error) {
	p, err := o.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Rename implements FS.
func (o *OSFS) Rename(oldname, newname string) error {
	a, err := o.path(oldname)
	if err != nil {
		return err
	}
	b, err := o.path(newname)
	if err != nil {
		return err
	}
	return os.Rename(a, b)
}

// Remove implements FS.
func (o *OSFS) Remove(name string) error {
	p, err := o.path(name)
	if err != nil {
		return err
	}
	return os.Remove(p)
}

// MkdirAll implements FS.
func (o *OSFS) MkdirAll(dir string) error {
	p, err := o.path(dir)
	if err != nil {
		return err
	}
	return os.MkdirAll(p, 0o755)
}

// SyncDir implements FS: it opens the directory and fsyncs it.
func (o *OSFS) SyncDir(dir string) error {
	p, err := o.path(dir)
	if err != nil {
		return err
	}
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// Stat implements FS.
func (o *OSFS) Stat(name string) (fs.FileInfo, error) {
	p, err := o.path(name)
	if err != nil {
		return nil, err
	}
	return os.Stat(p)
}

// List implements FS.
func (o *OSFS) List(dir string) ([]string, error) {
	p, err := o.path(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// HostPath implements FS: the file's own path.
func (o *OSFS) HostPath(name string) (string, error) {
	return o.path(name)
}

// String returns the root directory.
func (o *OSFS) String() string { return o.root }

// osFile adapts *os.File; it exists so that File stays an interface of
// exactly the methods the store uses.
type osFile struct{ f *os.File }

func (f osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f osFile) Close() error                             { return f.f.Close() }
func (f osFile) Stat() (fs.FileInfo, error)               { return f.f.Stat() }
func (f osFile) Truncate(size int64) error                { return f.f.Truncate(size) }
