package fs

import (
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FS is the client's path view: io/fs.FS, fs.StatFS, fs.ReadDirFS,
// fs.ReadFileFS and fs.ReadLinkFS, plus the writing operations Create,
// OpenFile, Mkdir, MkdirAll, Remove, RemoveAll, Rename, Symlink, Link and
// Truncate. (It is a type of its own because the inode API already uses
// the names Open, Create, Mkdir ... on Client.)
//
// Names are io/fs paths: slash-separated, relative to the root, no "."
// or ".." elements ("." is the root). Symbolic links are followed in every element but the last,
// and in the last too by Open, OpenFile, Stat, ReadFile, ReadDir and
// Truncate; an absolute target starts at the root. Errors are
// *fs.PathError (*fs.LinkError for Rename and Link) wrapping a
// syscall.Errno, or fs.ErrInvalid for a name that is not a valid path.
//
// Files are consistent close-to-open: every Open asks the server, and
// nothing is cached in between.
type FS struct {
	c   *Client
	ctx context.Context
}

var (
	_ iofs.FS         = (*FS)(nil)
	_ iofs.StatFS     = (*FS)(nil)
	_ iofs.ReadDirFS  = (*FS)(nil)
	_ iofs.ReadFileFS = (*FS)(nil)
	_ iofs.ReadLinkFS = (*FS)(nil)
)

// FS returns the client's path view. Its operations run under
// context.Background (each bounded by the reconnect timeout).
func (c *Client) FS() *FS { return &FS{c: c, ctx: context.Background()} }

// WithContext returns a view whose operations run under ctx.
func (f *FS) WithContext(ctx context.Context) *FS { return &FS{c: f.c, ctx: ctx} }

// maxSymlinkHops is where path resolution gives up with ELOOP, as Linux.
const maxSymlinkHops = 40

// clean turns a name into path elements, or reports it invalid.
func clean(name string) ([]string, bool) {
	if !iofs.ValidPath(name) {
		return nil, false
	}
	if name == "." {
		return nil, true
	}
	return strings.Split(name, "/"), true
}

func splitTarget(t string) []string {
	var out []string
	for _, e := range strings.Split(t, "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}

// walk resolves elems from the root, following symbolic links in every
// element and, with followLast, in the last.
func (f *FS) walk(elems []string, followLast bool) (Attr, error) {
	cur, err := f.c.GetAttr(f.ctx, RootIno)
	if err != nil {
		return Attr{}, err
	}
	hops := 0
	for len(elems) > 0 {
		el := elems[0]
		elems = elems[1:]
		if cur.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return Attr{}, syscall.ENOTDIR
		}
		a, err := f.c.Lookup(f.ctx, cur.Ino, el)
		if err != nil {
			return Attr{}, err
		}
		if a.Mode&syscall.S_IFMT == syscall.S_IFLNK && (len(elems) > 0 || followLast) {
			if hops++; hops > maxSymlinkHops {
				return Attr{}, syscall.ELOOP
			}
			t, err := f.c.Readlink(f.ctx, a.Ino)
			if err != nil {
				return Attr{}, err
			}
			if strings.HasPrefix(t, "/") {
				if cur, err = f.c.GetAttr(f.ctx, RootIno); err != nil {
					return Attr{}, err
				}
			}
			elems = append(splitTarget(t), elems...)
			continue
		}
		cur = a
	}
	return cur, nil
}

// parent resolves the directory of a name and returns it with the last
// element.
func (f *FS) parent(op, name string) (Attr, string, error) {
	elems, ok := clean(name)
	if !ok {
		return Attr{}, "", &iofs.PathError{Op: op, Path: name, Err: iofs.ErrInvalid}
	}
	if len(elems) == 0 {
		return Attr{}, "", &iofs.PathError{Op: op, Path: name, Err: syscall.EBUSY}
	}
	dir, err := f.walk(elems[:len(elems)-1], true)
	if err != nil {
		return Attr{}, "", &iofs.PathError{Op: op, Path: name, Err: err}
	}
	if dir.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return Attr{}, "", &iofs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return dir, elems[len(elems)-1], nil
}

func (f *FS) resolve(op, name string, follow bool) (Attr, error) {
	elems, ok := clean(name)
	if !ok {
		return Attr{}, &iofs.PathError{Op: op, Path: name, Err: iofs.ErrInvalid}
	}
	a, err := f.walk(elems, follow)
	if err != nil {
		return Attr{}, &iofs.PathError{Op: op, Path: name, Err: err}
	}
	return a, nil
}

// Open opens the named file for reading.
func (f *FS) Open(name string) (iofs.File, error) {
	return f.OpenFile(name, syscall.O_RDONLY, 0)
}

// Create creates or truncates the named file, as os.Create.
func (f *FS) Create(name string) (*File, error) {
	return f.OpenFile(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_TRUNC, 0o666)
}

// OpenFile opens the named file with flag (O_RDONLY, O_WRONLY, O_RDWR,
// O_CREATE, O_EXCL, O_TRUNC, O_APPEND) and, when it creates it, perm.
func (f *FS) OpenFile(name string, flag int, perm iofs.FileMode) (*File, error) {
	var a Attr
	var h Handle
	var err error
	if flag&syscall.O_CREAT != 0 {
		var dir Attr
		var base string
		if dir, base, err = f.parent("open", name); err != nil {
			return nil, err
		}
		_, lerr := f.c.Lookup(f.ctx, dir.Ino, base)
		if lerr == nil && flag&syscall.O_EXCL == 0 {
			// It exists: open it (following a symbolic link).
			elems, _ := clean(name)
			if a, err = f.walk(elems, true); err == nil {
				h, a, err = f.c.OpenAttr(f.ctx, a.Ino, flag&^syscall.O_CREAT)
			}
		} else {
			a, h, err = f.c.Create(f.ctx, dir.Ino, base, unixPerm(perm), f.c.uid, f.c.gid, flag)
		}
	} else {
		if a, err = f.resolve("open", name, true); err != nil {
			return nil, err
		}
		h, a, err = f.c.OpenAttr(f.ctx, a.Ino, flag)
	}
	if err != nil {
		var pe *iofs.PathError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, &iofs.PathError{Op: "open", Path: name, Err: err}
	}
	fl := &File{fs: f, name: name, ino: a.Ino, h: h, flag: flag, attr: a}
	return fl, nil
}

// Stat returns the named file's FileInfo, following symbolic links.
func (f *FS) Stat(name string) (iofs.FileInfo, error) {
	a, err := f.resolve("stat", name, true)
	if err != nil {
		return nil, err
	}
	return &fileInfo{name: path.Base(name), a: a}, nil
}

// Lstat returns the named file's FileInfo without following a final
// symbolic link.
func (f *FS) Lstat(name string) (iofs.FileInfo, error) {
	a, err := f.resolve("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return &fileInfo{name: path.Base(name), a: a}, nil
}

// ReadLink returns a symbolic link's target.
func (f *FS) ReadLink(name string) (string, error) {
	a, err := f.resolve("readlink", name, false)
	if err != nil {
		return "", err
	}
	t, err := f.c.Readlink(f.ctx, a.Ino)
	if err != nil {
		return "", &iofs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

// ReadDir lists the named directory, sorted by name, without "." and "..".
func (f *FS) ReadDir(name string) ([]iofs.DirEntry, error) {
	a, err := f.resolve("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, &iofs.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	}
	var out []iofs.DirEntry
	err = f.c.ReadDir(f.ctx, a.Ino, 0, true, func(e DirEntry) bool {
		if e.Name != "." && e.Name != ".." {
			out = append(out, &dirEntry{e})
		}
		return true
	})
	if err != nil {
		return nil, &iofs.PathError{Op: "readdir", Path: name, Err: err}
	}
	slices.SortFunc(out, func(a, b iofs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// ReadFile reads the whole named file.
func (f *FS) ReadFile(name string) ([]byte, error) {
	a, err := f.resolve("read", name, true)
	if err != nil {
		return nil, err
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, &iofs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	buf := make([]byte, a.Size)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, 0)[:n]
			buf = buf[:cap(buf)]
		}
		m, err := f.c.Read(f.ctx, a.Ino, 0, buf[n:], int64(n))
		if err != nil {
			return nil, &iofs.PathError{Op: "read", Path: name, Err: err}
		}
		n += m
		if m < len(buf[n-m:]) {
			return buf[:n], nil
		}
	}
}

// Mkdir makes a directory.
func (f *FS) Mkdir(name string, perm iofs.FileMode) error {
	dir, base, err := f.parent("mkdir", name)
	if err != nil {
		return err
	}
	if _, err := f.c.Mkdir(f.ctx, dir.Ino, base, unixPerm(perm), f.c.uid, f.c.gid); err != nil {
		return &iofs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	return nil
}

// MkdirAll makes a directory and any parents it lacks, as os.MkdirAll.
func (f *FS) MkdirAll(name string, perm iofs.FileMode) error {
	elems, ok := clean(name)
	if !ok {
		return &iofs.PathError{Op: "mkdir", Path: name, Err: iofs.ErrInvalid}
	}
	for i := range elems {
		p := strings.Join(elems[:i+1], "/")
		err := f.Mkdir(p, perm)
		if err == nil {
			continue
		}
		if errors.Is(err, syscall.EEXIST) {
			if st, serr := f.Stat(p); serr == nil && st.IsDir() {
				continue
			}
			return &iofs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
		}
		return err
	}
	return nil
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(name string) error {
	dir, base, err := f.parent("remove", name)
	if err != nil {
		return err
	}
	err = f.c.Unlink(f.ctx, dir.Ino, base)
	if errors.Is(err, syscall.EISDIR) {
		err = f.c.Rmdir(f.ctx, dir.Ino, base)
	}
	if err != nil {
		return &iofs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

// RemoveAll removes name and everything below it, as os.RemoveAll: a
// name that does not exist is no error.
func (f *FS) RemoveAll(name string) error {
	elems, ok := clean(name)
	if !ok {
		return &iofs.PathError{Op: "removeall", Path: name, Err: iofs.ErrInvalid}
	}
	if len(elems) == 0 {
		return &iofs.PathError{Op: "removeall", Path: name, Err: syscall.EBUSY}
	}
	a, err := f.walk(elems, false)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return &iofs.PathError{Op: "removeall", Path: name, Err: err}
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		ents, err := f.ReadDir(name)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := f.RemoveAll(path.Join(strings.Join(elems, "/"), e.Name())); err != nil {
				return err
			}
		}
	}
	if err := f.Remove(name); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// Rename moves oldname to newname, replacing a file (or an empty
// directory, for a directory) already there.
func (f *FS) Rename(oldname, newname string) error {
	od, ob, err := f.parent("rename", oldname)
	if err != nil {
		return &iofs.PathError{Op: "rename", Path: oldname, Err: errors.Unwrap(err)}
	}
	nd, nb, err := f.parent("rename", newname)
	if err != nil {
		return &iofs.PathError{Op: "rename", Path: newname, Err: errors.Unwrap(err)}
	}
	if err := f.c.Rename(f.ctx, od.Ino, ob, nd.Ino, nb, 0); err != nil {
		return &linkError{"rename", oldname, newname, err}
	}
	return nil
}

// Symlink makes newname a symbolic link to oldname.
func (f *FS) Symlink(oldname, newname string) error {
	dir, base, err := f.parent("symlink", newname)
	if err != nil {
		return err
	}
	if _, err := f.c.Symlink(f.ctx, dir.Ino, base, oldname, f.c.uid, f.c.gid); err != nil {
		return &linkError{"symlink", oldname, newname, err}
	}
	return nil
}

// Link makes newname another name of oldname (not following a final
// symbolic link, as link(2)).
func (f *FS) Link(oldname, newname string) error {
	a, err := f.resolve("link", oldname, false)
	if err != nil {
		return err
	}
	dir, base, err := f.parent("link", newname)
	if err != nil {
		return err
	}
	if _, err := f.c.Link(f.ctx, a.Ino, dir.Ino, base); err != nil {
		return &linkError{"link", oldname, newname, err}
	}
	return nil
}

// Truncate sets the named file's size.
func (f *FS) Truncate(name string, size int64) error {
	if size < 0 {
		return &iofs.PathError{Op: "truncate", Path: name, Err: syscall.EINVAL}
	}
	a, err := f.resolve("truncate", name, true)
	if err != nil {
		return err
	}
	sz := uint64(size)
	if _, err := f.c.SetAttr(f.ctx, a.Ino, SetAttr{Size: &sz}); err != nil {
		return &iofs.PathError{Op: "truncate", Path: name, Err: err}
	}
	return nil
}

// linkError is os.LinkError's shape, for two-name operations.
type linkError struct {
	Op, Old, New string
	Err          error
}

func (e *linkError) Error() string { return e.Op + " " + e.Old + " " + e.New + ": " + e.Err.Error() }
func (e *linkError) Unwrap() error { return e.Err }

// File is an open file of an FS. ReadAt and WriteAt follow io.ReaderAt
// and io.WriterAt and may run in parallel; Read, Write and Seek share an
// offset.
type File struct {
	fs   *FS
	name string
	ino  Ino
	h    Handle
	flag int
	attr Attr // at open

	// offMu guards off; Read, Write and Seek hold it across their I/O,
	// so that they move the offset one after the other. Taken before mu.
	offMu sync.Mutex
	off   int64
	// rbuf holds what the last Read fetched beyond what it returned,
	// starting at file offset rbufAt, so that small sequential Reads do
	// not each cost a round trip. Guarded by offMu; dropped by every
	// Write and WriteAt of this File. (Close-to-open consistency allows
	// it: another client's writes show at the next Open.)
	rbuf   []byte
	rbufAt int64
	// mu guards closed and the directory listing state.
	mu     sync.Mutex
	closed bool
	cookie uint64
	dirEOF bool
}

var (
	_ iofs.File        = (*File)(nil)
	_ iofs.ReadDirFile = (*File)(nil)
	_ io.ReaderAt      = (*File)(nil)
	_ io.WriterAt      = (*File)(nil)
	_ io.Seeker        = (*File)(nil)
)

// Ino is the file's inode number.
func (fl *File) Ino() Ino { return fl.ino }

// Name is the name the file was opened with.
func (fl *File) Name() string { return fl.name }

func (fl *File) pathErr(op string, err error) error {
	return &iofs.PathError{Op: op, Path: fl.name, Err: err}
}

func (fl *File) check(op string, write bool) error {
	fl.mu.Lock()
	closed := fl.closed
	fl.mu.Unlock()
	acc := fl.flag & syscall.O_ACCMODE
	switch {
	case closed:
		return fl.pathErr(op, iofs.ErrClosed)
	case write && acc == syscall.O_RDONLY, !write && acc == syscall.O_WRONLY:
		return fl.pathErr(op, syscall.EBADF)
	}
	return nil
}

// Stat returns the file's current FileInfo.
func (fl *File) Stat() (iofs.FileInfo, error) {
	if err := fl.check("stat", false); err != nil && !errors.Is(err, syscall.EBADF) {
		return nil, err
	}
	a, err := fl.fs.c.GetAttr(fl.fs.ctx, fl.ino)
	if err != nil {
		return nil, fl.pathErr("stat", err)
	}
	return &fileInfo{name: path.Base(fl.name), a: a}, nil
}

// ReadAt reads at off; a short count comes with io.EOF.
func (fl *File) ReadAt(p []byte, off int64) (int, error) {
	if err := fl.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fl.pathErr("read", syscall.EINVAL)
	}
	if fl.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return 0, fl.pathErr("read", syscall.EISDIR)
	}
	n, err := fl.fs.c.Read(fl.fs.ctx, fl.ino, fl.h, p, off)
	if err != nil {
		return n, fl.pathErr("read", err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Read reads at the file offset and advances it.
func (fl *File) Read(p []byte) (int, error) {
	fl.offMu.Lock()
	defer fl.offMu.Unlock()
	if len(p) == 0 {
		return 0, fl.check("read", false)
	}
	if fl.off >= fl.rbufAt && fl.off < fl.rbufAt+int64(len(fl.rbuf)) {
		n := copy(p, fl.rbuf[fl.off-fl.rbufAt:])
		fl.off += int64(n)
		return n, nil
	}
	if len(p) < readBuffer {
		if cap(fl.rbuf) < readBuffer {
			fl.rbuf = make([]byte, readBuffer)
		}
		n, err := fl.ReadAt(fl.rbuf[:readBuffer], fl.off)
		fl.rbuf, fl.rbufAt = fl.rbuf[:n], fl.off
		if n == 0 {
			return 0, err
		}
		n = copy(p, fl.rbuf)
		fl.off += int64(n)
		return n, nil
	}
	n, err := fl.ReadAt(p, fl.off)
	fl.off += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// readBuffer is how much a small Read fetches.
const readBuffer = 64 << 10

// WriteAt writes at off (ignoring O_APPEND, as os.File refuses it).
func (fl *File) WriteAt(p []byte, off int64) (int, error) {
	if err := fl.check("write", true); err != nil {
		return 0, err
	}
	if fl.offMu.TryLock() {
		fl.rbuf = fl.rbuf[:0]
		fl.offMu.Unlock()
	}
	if off < 0 {
		return 0, fl.pathErr("write", syscall.EINVAL)
	}
	n, err := fl.fs.c.Write(fl.fs.ctx, fl.ino, fl.h, p, off)
	if err != nil {
		return n, fl.pathErr("write", err)
	}
	return n, nil
}

// Write writes at the file offset (at the end with O_APPEND) and
// advances it.
func (fl *File) Write(p []byte) (int, error) {
	if err := fl.check("write", true); err != nil {
		return 0, err
	}
	fl.offMu.Lock()
	defer fl.offMu.Unlock()
	fl.rbuf = fl.rbuf[:0]
	if fl.flag&syscall.O_APPEND != 0 {
		n, err := fl.fs.c.WriteAppend(fl.fs.ctx, fl.ino, fl.h, p)
		if err != nil {
			return n, fl.pathErr("write", err)
		}
		a, err := fl.fs.c.GetAttr(fl.fs.ctx, fl.ino)
		if err != nil {
			return n, fl.pathErr("write", err)
		}
		fl.off = int64(a.Size)
		return n, nil
	}
	n, err := fl.fs.c.Write(fl.fs.ctx, fl.ino, fl.h, p, fl.off)
	fl.off += int64(n)
	if err != nil {
		return n, fl.pathErr("write", err)
	}
	return n, nil
}

// Seek sets the offset for the next Read or Write.
func (fl *File) Seek(offset int64, whence int) (int64, error) {
	fl.offMu.Lock()
	defer fl.offMu.Unlock()
	fl.mu.Lock()
	closed := fl.closed
	fl.mu.Unlock()
	if closed {
		return 0, fl.pathErr("seek", iofs.ErrClosed)
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = fl.off
	case io.SeekEnd:
		a, err := fl.fs.c.GetAttr(fl.fs.ctx, fl.ino)
		if err != nil {
			return 0, fl.pathErr("seek", err)
		}
		base = int64(a.Size)
	default:
		return 0, fl.pathErr("seek", syscall.EINVAL)
	}
	if base+offset < 0 {
		return 0, fl.pathErr("seek", syscall.EINVAL)
	}
	fl.off = base + offset
	if offset == 0 && whence == io.SeekStart {
		fl.mu.Lock()
		fl.cookie, fl.dirEOF = 0, false
		fl.mu.Unlock()
	}
	return fl.off, nil
}

// Sync makes the file's data durable on the target.
func (fl *File) Sync() error {
	if err := fl.fs.c.Fsync(fl.fs.ctx, fl.ino, fl.h, false); err != nil {
		return fl.pathErr("sync", err)
	}
	return nil
}

// Truncate sets the file's size.
func (fl *File) Truncate(size int64) error {
	if err := fl.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return fl.pathErr("truncate", syscall.EINVAL)
	}
	sz := uint64(size)
	if _, err := fl.fs.c.SetAttr(fl.fs.ctx, fl.ino, SetAttr{Size: &sz}); err != nil {
		return fl.pathErr("truncate", err)
	}
	return nil
}

// ReadDir reads the directory's entries in directory order, as
// fs.ReadDirFile says: n > 0 at most n (io.EOF at the end), n <= 0 all
// that are left.
func (fl *File) ReadDir(n int) ([]iofs.DirEntry, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.closed {
		return nil, fl.pathErr("readdir", iofs.ErrClosed)
	}
	if fl.attr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fl.pathErr("readdir", syscall.ENOTDIR)
	}
	var out []iofs.DirEntry
	if !fl.dirEOF {
		ended := true
		err := fl.fs.c.ReadDir(fl.fs.ctx, fl.ino, fl.cookie, true, func(e DirEntry) bool {
			fl.cookie = e.Cookie
			if e.Name != "." && e.Name != ".." {
				out = append(out, &dirEntry{e})
			}
			if n > 0 && len(out) == n {
				ended = false
				return false
			}
			return true
		})
		if err != nil {
			return out, fl.pathErr("readdir", err)
		}
		fl.dirEOF = ended
	}
	if n > 0 && len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// Close releases the file's handle.
func (fl *File) Close() error {
	fl.mu.Lock()
	if fl.closed {
		fl.mu.Unlock()
		return fl.pathErr("close", iofs.ErrClosed)
	}
	fl.closed = true
	fl.mu.Unlock()
	if err := fl.fs.c.Release(fl.fs.ctx, fl.ino, fl.h); err != nil {
		return fl.pathErr("close", err)
	}
	return nil
}

// fileInfo is an Attr as an fs.FileInfo; Sys returns the Attr.
type fileInfo struct {
	name string
	a    Attr
}

func (fi *fileInfo) Name() string                { return fi.name }
func (fi *fileInfo) Size() int64                 { return int64(fi.a.Size) }
func (fi *fileInfo) Mode() iofs.FileMode         { return fileMode(fi.a.Mode) }
func (fi *fileInfo) ModTime() time.Time          { return fi.a.Mtime }
func (fi *fileInfo) IsDir() bool                 { return fi.a.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (fi *fileInfo) Sys() any                    { return fi.a }
func (fi *fileInfo) String() string              { return iofs.FormatFileInfo(fi) }
func (d *dirEntry) Name() string                 { return d.e.Name }
func (d *dirEntry) IsDir() bool                  { return d.e.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (d *dirEntry) Type() iofs.FileMode          { return fileMode(d.e.Mode).Type() }
func (d *dirEntry) Info() (iofs.FileInfo, error) { return &fileInfo{name: d.e.Name, a: d.e.Attr}, nil }
func (d *dirEntry) String() string               { return iofs.FormatDirEntry(d) }

// dirEntry is a READDIRPLUS entry as an fs.DirEntry.
type dirEntry struct{ e DirEntry }

// fileMode converts a Unix mode to an fs.FileMode.
func fileMode(m uint32) iofs.FileMode {
	fm := iofs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		fm |= iofs.ModeDir
	case syscall.S_IFLNK:
		fm |= iofs.ModeSymlink
	case syscall.S_IFIFO:
		fm |= iofs.ModeNamedPipe
	case syscall.S_IFSOCK:
		fm |= iofs.ModeSocket
	case syscall.S_IFCHR:
		fm |= iofs.ModeDevice | iofs.ModeCharDevice
	case syscall.S_IFBLK:
		fm |= iofs.ModeDevice
	}
	if m&syscall.S_ISUID != 0 {
		fm |= iofs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= iofs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= iofs.ModeSticky
	}
	return fm
}

// unixPerm converts permission bits of an fs.FileMode to a Unix mode.
func unixPerm(p iofs.FileMode) uint32 {
	m := uint32(p.Perm())
	if p&iofs.ModeSetuid != 0 {
		m |= syscall.S_ISUID
	}
	if p&iofs.ModeSetgid != 0 {
		m |= syscall.S_ISGID
	}
	if p&iofs.ModeSticky != 0 {
		m |= syscall.S_ISVTX
	}
	return m
}
