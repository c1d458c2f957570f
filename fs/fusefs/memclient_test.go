package fusefs

import (
	"context"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// memClient is an in-memory file service with the file client's inode
// API and the target's semantics as the contract states them: inodes
// live while linked or open, directory cookies are stable resume points,
// errors are syscall.Errno. The node layer's tests mount it for real.
type memClient struct {
	mu      sync.Mutex // guards everything below
	inodes  map[Ino]*memInode
	next    Ino
	handles map[Handle]Ino
	nextH   Handle
	calls   map[string]int // client calls by method, for the tests
	fail    syscall.Errno  // when set, every call fails with it
	lastSet SetAttr        // the last SetAttr's request
	// releases, when set, holds the Release of every handle that
	// Create made (created) until it is closed: the RELEASE the kernel
	// sends late after a file was created and written.
	releases chan struct{}
	created  map[Handle]bool
	// stall, when set, holds every GetXattr until it is closed: a
	// request the mount never answers (TestWatchdogAborts).
	stall chan struct{}
}

// holdReleases makes the Release of handles that Create made wait until
// the returned function is called (at the latest when the test ends).
func (m *memClient) holdReleases(t testing.TB) (let func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.releases = ch
	m.mu.Unlock()
	let = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(let)
	return let
}

func (m *memClient) lastSetAttr() SetAttr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastSet
}

type memInode struct {
	attr   Attr
	data   map[int64][]byte // pages of memPage bytes; absent: a hole
	target string
	xattrs map[string][]byte
	dir    *memDir
	parent Ino // directories: for ".."
	open   int
}

type memDir struct {
	names      map[string]Ino
	order      []memDirent // by cookie
	nextCookie uint64
}

type memDirent struct {
	name   string
	cookie uint64
}

const memPage = 64 << 10

func newMemClient() *memClient {
	m := &memClient{inodes: map[Ino]*memInode{}, next: RootIno, handles: map[Handle]Ino{}, nextH: 1, calls: map[string]int{}}
	root := m.alloc(syscall.S_IFDIR|0o755, 0, 0)
	root.parent = RootIno
	return m
}

func (m *memClient) called(op string) syscall.Errno {
	m.calls[op]++
	return m.fail
}

func (m *memClient) count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

func (m *memClient) setFail(e syscall.Errno) {
	m.mu.Lock()
	m.fail = e
	m.mu.Unlock()
}

func (m *memClient) alloc(mode, uid, gid uint32) *memInode {
	now := time.Now()
	ino := m.next
	m.next++
	in := &memInode{attr: Attr{Ino: ino, Gen: 1, Mode: mode, Nlink: 1, Uid: uid, Gid: gid,
		Atime: now, Mtime: now, Ctime: now}, xattrs: map[string][]byte{}}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		in.dir = &memDir{names: map[string]Ino{}, nextCookie: 3}
		in.attr.Nlink = 2
		in.attr.Size = 4096
	}
	if mode&syscall.S_IFMT == syscall.S_IFREG {
		in.data = map[int64][]byte{}
	}
	m.inodes[ino] = in
	return in
}

func validName(name string) syscall.Errno {
	switch {
	case name == "" || strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	case len(name) > maxNameLen:
		return syscall.ENAMETOOLONG
	}
	return 0
}

func (m *memClient) dirOf(ino Ino) (*memInode, syscall.Errno) {
	in, ok := m.inodes[ino]
	if !ok {
		return nil, syscall.ENOENT
	}
	if in.dir == nil {
		return nil, syscall.ENOTDIR
	}
	return in, 0
}

func (in *memInode) touch() {
	now := time.Now()
	in.attr.Mtime, in.attr.Ctime = now, now
}

func (d *memDir) add(name string, ino Ino) {
	d.names[name] = ino
	d.order = append(d.order, memDirent{name: name, cookie: d.nextCookie})
	d.nextCookie++
}

func (d *memDir) remove(name string) {
	delete(d.names, name)
	for i, e := range d.order {
		if e.name == name {
			d.order = append(d.order[:i], d.order[i+1:]...)
			return
		}
	}
}

// maybeFree drops an inode no name and no handle refer to.
func (m *memClient) maybeFree(in *memInode) {
	if in.open == 0 && in.attr.Nlink == 0 {
		delete(m.inodes, in.attr.Ino)
	}
}

func (m *memClient) newEntry(parent Ino, name string, mode, uid, gid uint32) (*memInode, syscall.Errno) {
	p, e := m.dirOf(parent)
	if e != 0 {
		return nil, e
	}
	if e := validName(name); e != 0 {
		return nil, e
	}
	if _, ok := p.dir.names[name]; ok || name == "." || name == ".." {
		return nil, syscall.EEXIST
	}
	in := m.alloc(mode, uid, gid)
	p.dir.add(name, in.attr.Ino)
	if in.dir != nil {
		in.parent = parent
		p.attr.Nlink++
	}
	p.touch()
	return in, 0
}

func (m *memClient) Lookup(ctx context.Context, parent Ino, name string) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Lookup"); e != 0 {
		return Attr{}, e
	}
	p, e := m.dirOf(parent)
	if e != 0 {
		return Attr{}, e
	}
	if e := validName(name); e != 0 {
		return Attr{}, e
	}
	ino, ok := p.dir.names[name]
	if !ok {
		return Attr{}, syscall.ENOENT
	}
	return m.inodes[ino].attr, nil
}

func (m *memClient) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("GetAttr"); e != 0 {
		return Attr{}, e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return Attr{}, syscall.ENOENT
	}
	return in.attr, nil
}

func (m *memClient) SetAttr(ctx context.Context, ino Ino, s SetAttr) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("SetAttr"); e != 0 {
		return Attr{}, e
	}
	m.lastSet = s
	in, ok := m.inodes[ino]
	if !ok {
		return Attr{}, syscall.ENOENT
	}
	now := time.Now()
	if s.Size != nil {
		if in.data == nil {
			return Attr{}, syscall.EISDIR
		}
		in.truncate(*s.Size)
		in.attr.Mtime = now
	}
	if s.Mode != nil {
		in.attr.Mode = in.attr.Mode&syscall.S_IFMT | *s.Mode&0o7777
	}
	if s.Uid != nil {
		in.attr.Uid = *s.Uid
	}
	if s.Gid != nil {
		in.attr.Gid = *s.Gid
	}
	switch {
	case s.AtimeNow:
		in.attr.Atime = now
	case s.Atime != nil:
		in.attr.Atime = *s.Atime
	}
	switch {
	case s.MtimeNow:
		in.attr.Mtime = now
	case s.Mtime != nil:
		in.attr.Mtime = *s.Mtime
	}
	in.attr.Ctime = now
	return in.attr, nil
}

func (in *memInode) truncate(size uint64) {
	for pg, b := range in.data {
		start := uint64(pg) * memPage
		switch {
		case start >= size:
			delete(in.data, pg)
		case start+memPage > size:
			clear(b[size-start:])
		}
	}
	in.attr.Size = size
	in.attr.Blocks = uint64(len(in.data)) * memPage / 512
}

func (m *memClient) Mknod(ctx context.Context, parent Ino, name string, mode, rdev, uid, gid uint32) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Mknod"); e != 0 {
		return Attr{}, e
	}
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFIFO:
	default:
		return Attr{}, syscall.EPERM
	}
	in, e := m.newEntry(parent, name, mode, uid, gid)
	if e != 0 {
		return Attr{}, e
	}
	return in.attr, nil
}

func (m *memClient) Mkdir(ctx context.Context, parent Ino, name string, mode, uid, gid uint32) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Mkdir"); e != 0 {
		return Attr{}, e
	}
	in, e := m.newEntry(parent, name, syscall.S_IFDIR|mode&0o7777, uid, gid)
	if e != 0 {
		return Attr{}, e
	}
	return in.attr, nil
}

func (m *memClient) Create(ctx context.Context, parent Ino, name string, mode, uid, gid uint32, flags int) (Attr, Handle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Create"); e != 0 {
		return Attr{}, 0, e
	}
	p, e := m.dirOf(parent)
	if e != 0 {
		return Attr{}, 0, e
	}
	var in *memInode
	if ino, ok := p.dir.names[name]; ok {
		if flags&syscall.O_EXCL != 0 {
			return Attr{}, 0, syscall.EEXIST
		}
		in = m.inodes[ino]
		if in.dir != nil {
			return Attr{}, 0, syscall.EISDIR
		}
		if flags&syscall.O_TRUNC != 0 {
			in.truncate(0)
			in.touch()
		}
	} else {
		in, e = m.newEntry(parent, name, syscall.S_IFREG|mode&0o7777, uid, gid)
		if e != 0 {
			return Attr{}, 0, e
		}
	}
	h := m.openLocked(in)
	if m.created == nil {
		m.created = make(map[Handle]bool)
	}
	m.created[h] = true
	return in.attr, h, nil
}

func (m *memClient) openLocked(in *memInode) Handle {
	h := m.nextH
	m.nextH++
	m.handles[h] = in.attr.Ino
	in.open++
	return h
}

func (m *memClient) Symlink(ctx context.Context, parent Ino, name, target string, uid, gid uint32) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Symlink"); e != 0 {
		return Attr{}, e
	}
	in, e := m.newEntry(parent, name, syscall.S_IFLNK|0o777, uid, gid)
	if e != 0 {
		return Attr{}, e
	}
	in.target = target
	in.attr.Size = uint64(len(target))
	return in.attr, nil
}

func (m *memClient) Readlink(ctx context.Context, ino Ino) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Readlink"); e != 0 {
		return "", e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return "", syscall.ENOENT
	}
	if in.attr.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", syscall.EINVAL
	}
	return in.target, nil
}

func (m *memClient) Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Link"); e != 0 {
		return Attr{}, e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return Attr{}, syscall.ENOENT
	}
	if in.dir != nil {
		return Attr{}, syscall.EPERM
	}
	p, e := m.dirOf(newParent)
	if e != 0 {
		return Attr{}, e
	}
	if e := validName(newName); e != 0 {
		return Attr{}, e
	}
	if _, ok := p.dir.names[newName]; ok {
		return Attr{}, syscall.EEXIST
	}
	p.dir.add(newName, ino)
	p.touch()
	in.attr.Nlink++
	in.attr.Ctime = time.Now()
	return in.attr, nil
}

func (m *memClient) child(parent Ino, name string) (*memInode, *memInode, syscall.Errno) {
	p, e := m.dirOf(parent)
	if e != 0 {
		return nil, nil, e
	}
	if e := validName(name); e != 0 {
		return nil, nil, e
	}
	ino, ok := p.dir.names[name]
	if !ok {
		return nil, nil, syscall.ENOENT
	}
	return p, m.inodes[ino], 0
}

func (m *memClient) Unlink(ctx context.Context, parent Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Unlink"); e != 0 {
		return e
	}
	p, in, e := m.child(parent, name)
	if e != 0 {
		return e
	}
	if in.dir != nil {
		return syscall.EISDIR
	}
	p.dir.remove(name)
	p.touch()
	in.attr.Nlink--
	in.attr.Ctime = time.Now()
	m.maybeFree(in)
	return nil
}

func (m *memClient) Rmdir(ctx context.Context, parent Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Rmdir"); e != 0 {
		return e
	}
	if name == "." {
		return syscall.EINVAL
	}
	p, in, e := m.child(parent, name)
	if e != 0 {
		return e
	}
	if in.dir == nil {
		return syscall.ENOTDIR
	}
	if len(in.dir.names) > 0 {
		return syscall.ENOTEMPTY
	}
	p.dir.remove(name)
	p.attr.Nlink--
	p.touch()
	in.attr.Nlink = 0
	m.maybeFree(in)
	return nil
}

// isAncestor reports whether dir a is d or above it.
func (m *memClient) isAncestor(a, d Ino) bool {
	for {
		if a == d {
			return true
		}
		if d == RootIno {
			return false
		}
		d = m.inodes[d].parent
	}
}

func (m *memClient) Rename(ctx context.Context, parent Ino, name string, newParent Ino, newName string, flags uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Rename"); e != 0 {
		return e
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	p, src, e := m.child(parent, name)
	if e != 0 {
		return e
	}
	np, e := m.dirOf(newParent)
	if e != 0 {
		return e
	}
	if e := validName(newName); e != 0 {
		return e
	}
	if src.dir != nil && m.isAncestor(src.attr.Ino, newParent) {
		return syscall.EINVAL
	}
	dstIno, exists := np.dir.names[newName]
	now := time.Now()
	if flags&RenameExchange != 0 {
		if !exists {
			return syscall.ENOENT
		}
		dst := m.inodes[dstIno]
		if dst.dir != nil && m.isAncestor(dstIno, parent) {
			return syscall.EINVAL
		}
		p.dir.names[name], np.dir.names[newName] = dstIno, src.attr.Ino
		if src.dir != nil {
			src.parent = newParent
		}
		if dst.dir != nil {
			dst.parent = parent
		}
		if (src.dir != nil) != (dst.dir != nil) && parent != newParent {
			if src.dir != nil {
				p.attr.Nlink--
				np.attr.Nlink++
			} else {
				p.attr.Nlink++
				np.attr.Nlink--
			}
		}
		src.attr.Ctime, dst.attr.Ctime = now, now
		p.touch()
		np.touch()
		return nil
	}
	if exists {
		if flags&RenameNoReplace != 0 {
			return syscall.EEXIST
		}
		if dstIno == src.attr.Ino {
			return nil
		}
		dst := m.inodes[dstIno]
		switch {
		case src.dir != nil && dst.dir == nil:
			return syscall.ENOTDIR
		case src.dir == nil && dst.dir != nil:
			return syscall.EISDIR
		case dst.dir != nil && len(dst.dir.names) > 0:
			return syscall.ENOTEMPTY
		}
		np.dir.remove(newName)
		if dst.dir != nil {
			dst.attr.Nlink = 0
			np.attr.Nlink--
		} else {
			dst.attr.Nlink--
		}
		dst.attr.Ctime = now
		m.maybeFree(dst)
	}
	p.dir.remove(name)
	np.dir.add(newName, src.attr.Ino)
	if src.dir != nil {
		src.parent = newParent
		p.attr.Nlink--
		np.attr.Nlink++
	}
	src.attr.Ctime = now
	p.touch()
	np.touch()
	return nil
}

func (m *memClient) handle(ino Ino, h Handle) (*memInode, syscall.Errno) {
	if m.handles[h] != ino {
		return nil, syscall.EBADF
	}
	return m.inodes[ino], 0
}

func (m *memClient) Open(ctx context.Context, ino Ino, flags int) (Handle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Open"); e != 0 {
		return 0, e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return 0, syscall.ENOENT
	}
	if in.dir != nil && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return 0, syscall.EISDIR
	}
	if flags&syscall.O_TRUNC != 0 && in.data != nil {
		in.truncate(0)
		in.touch()
	}
	return m.openLocked(in), nil
}

func (m *memClient) Release(ctx context.Context, ino Ino, h Handle) error {
	m.mu.Lock()
	if ch := m.releases; ch != nil && m.created[h] {
		m.mu.Unlock()
		<-ch
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	delete(m.created, h)
	m.calls["Release"]++
	in, e := m.handle(ino, h)
	if e != 0 {
		return e
	}
	delete(m.handles, h)
	in.open--
	m.maybeFree(in)
	return nil
}

func (m *memClient) Read(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Read"); e != 0 {
		return 0, e
	}
	in, e := m.handle(ino, h)
	if e != 0 {
		return 0, e
	}
	if in.data == nil {
		return 0, syscall.EISDIR
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if uint64(off) >= in.attr.Size {
		return 0, nil
	}
	n := min(int64(len(p)), int64(in.attr.Size)-off)
	for done := int64(0); done < n; {
		pg, po := (off+done)/memPage, (off+done)%memPage
		c := min(n-done, memPage-po)
		if b, ok := in.data[pg]; ok {
			copy(p[done:done+c], b[po:])
		} else {
			clear(p[done : done+c])
		}
		done += c
	}
	return int(n), nil
}

func (m *memClient) Write(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Write"); e != 0 {
		return 0, e
	}
	in, e := m.handle(ino, h)
	if e != 0 {
		return 0, e
	}
	if in.data == nil {
		return 0, syscall.EISDIR
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		pg, po := pos/memPage, pos%memPage
		b, ok := in.data[pg]
		if !ok {
			b = make([]byte, memPage)
			in.data[pg] = b
		}
		done += copy(b[po:], p[done:])
	}
	if end := uint64(off) + uint64(len(p)); end > in.attr.Size {
		in.attr.Size = end
	}
	in.attr.Blocks = uint64(len(in.data)) * memPage / 512
	in.touch()
	return len(p), nil
}

func (m *memClient) Fsync(ctx context.Context, ino Ino, h Handle, dataOnly bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Fsync"); e != 0 {
		return e
	}
	_, e := m.handle(ino, h)
	if e != 0 {
		return e
	}
	return nil
}

func (m *memClient) Fallocate(ctx context.Context, ino Ino, h Handle, mode uint32, off, length int64) error {
	const keepSize, punchHole = 1, 2
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("Fallocate"); e != 0 {
		return e
	}
	in, e := m.handle(ino, h)
	if e != 0 {
		return e
	}
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	end := uint64(off + length)
	switch mode {
	case 0:
		if end > in.attr.Size {
			in.attr.Size = end
		}
	case keepSize:
	case keepSize | punchHole:
		for pos := uint64(off); pos < end && pos < in.attr.Size; {
			pg, po := int64(pos/memPage), pos%memPage
			c := min(end-pos, memPage-po)
			if b, ok := in.data[pg]; ok {
				clear(b[po : po+c])
			}
			pos += c
		}
	default:
		return syscall.EOPNOTSUPP
	}
	in.touch()
	return nil
}

func (m *memClient) ReadDir(ctx context.Context, ino Ino, cookie uint64, plus bool, fn func(DirEntry) bool) error {
	m.mu.Lock()
	if e := m.called("ReadDir"); e != 0 {
		m.mu.Unlock()
		return e
	}
	d, e := m.dirOf(ino)
	if e != 0 {
		m.mu.Unlock()
		return e
	}
	var out []DirEntry
	add := func(name string, ino Ino, cookie uint64) {
		in := m.inodes[ino]
		de := DirEntry{Name: name, Ino: ino, Mode: in.attr.Mode & syscall.S_IFMT, Cookie: cookie}
		if plus {
			de.Attr = in.attr
		}
		out = append(out, de)
	}
	if cookie < 1 {
		add(".", ino, 1)
	}
	if cookie < 2 {
		add("..", d.parent, 2)
	}
	i := sort.Search(len(d.dir.order), func(i int) bool { return d.dir.order[i].cookie > cookie })
	for _, e := range d.dir.order[i:] {
		add(e.name, d.dir.names[e.name], e.cookie)
	}
	m.mu.Unlock()
	for _, e := range out {
		if !fn(e) {
			break
		}
	}
	return nil
}

func (m *memClient) StatFS(ctx context.Context) (StatFS, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("StatFS"); e != 0 {
		return StatFS{}, e
	}
	return StatFS{Blocks: 1 << 20, Bfree: 1 << 19, Bavail: 1 << 19, Files: 1 << 20,
		Ffree: 1<<20 - uint64(len(m.inodes)), Bsize: 4096, Frsize: 4096, NameLen: maxNameLen}, nil
}

func (m *memClient) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	m.mu.Lock()
	if stall := m.stall; stall != nil {
		m.mu.Unlock()
		<-stall
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	if e := m.called("GetXattr"); e != 0 {
		return nil, e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return nil, syscall.ENOENT
	}
	v, ok := in.xattrs[name]
	if !ok {
		return nil, syscall.ENODATA
	}
	return append([]byte(nil), v...), nil
}

func (m *memClient) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("SetXattr"); e != 0 {
		return e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return syscall.ENOENT
	}
	_, exists := in.xattrs[name]
	switch {
	case flags&1 != 0 && exists:
		return syscall.EEXIST
	case flags&2 != 0 && !exists:
		return syscall.ENODATA
	}
	in.xattrs[name] = append([]byte(nil), value...)
	in.attr.Ctime = time.Now()
	return nil
}

func (m *memClient) ListXattr(ctx context.Context, ino Ino) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("ListXattr"); e != 0 {
		return nil, e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return nil, syscall.ENOENT
	}
	var names []string
	for n := range in.xattrs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (m *memClient) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.called("RemoveXattr"); e != 0 {
		return e
	}
	in, ok := m.inodes[ino]
	if !ok {
		return syscall.ENOENT
	}
	if _, ok := in.xattrs[name]; !ok {
		return syscall.ENODATA
	}
	delete(in.xattrs, name)
	in.attr.Ctime = time.Now()
	return nil
}

var _ Client = (*memClient)(nil)

// CopyFileRange copies inside the client, as the target does.
func (m *memClient) CopyFileRange(ctx context.Context, src Ino, srcOff int64, dst Ino, dstOff int64, length int64) (int64, error) {
	m.mu.Lock()
	e := m.called("CopyFileRange")
	m.mu.Unlock()
	if e != 0 {
		return 0, e
	}
	hs, err := m.Open(ctx, src, syscall.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer m.Release(ctx, src, hs)
	hd, err := m.Open(ctx, dst, syscall.O_WRONLY)
	if err != nil {
		return 0, err
	}
	defer m.Release(ctx, dst, hd)
	buf := make([]byte, length)
	n, err := m.Read(ctx, src, hs, buf, srcOff)
	if err != nil || n == 0 {
		return 0, err
	}
	_, err = m.Write(ctx, dst, hd, buf[:n], dstOff)
	return int64(n), err
}
