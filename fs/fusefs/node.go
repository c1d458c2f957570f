package fusefs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	capfs "github.com/capsule-storage/capsule/fs"
)

// maxNameLen is the longest name a directory entry may have, in bytes.
const maxNameLen = 255

// fileSystem is what every node of one mount shares.
type fileSystem struct {
	c Client
	// entryTimeout is how long the kernel may cache a name (Options).
	entryTimeout time.Duration
	// guardedEntries: the mount serves other users and leaves access to
	// the target, so names in a directory not everyone may search are
	// not cached (see entryTimeoutIn).
	guardedEntries bool
	// writeBehind turns write-behind on (Options.WriteBehind).
	writeBehind bool
	// writeback: the kernel's writeback cache is on
	// (Options.WritebackCache; writeback.go).
	writeback bool
	incMu     sync.Mutex     // guards inc, written, nodes and every node's kept
	inc       map[Ino]uint64 // the current incarnation of inode numbers retired at least once
	written   map[Ino]uint64 // this mount's changes of a file's data, by inode (writeback.go, wrote)
	nodes     map[Ino]int    // the nodes go-fuse keeps of each inode number (writeback.go, keep)
	// wbBytes is the bytes of write-behind buffers taken (writebehind.go).
	wbBytes atomic.Int64
	// attrTimeout is how long the kernel may cache attributes
	// (Options.AttrTimeout), and the mount that a file has no
	// security.capability (noCaps).
	attrTimeout time.Duration
}

// node is one inode of the mount: a directory, regular file, symlink or
// fifo. It holds the capsule inode number; the file type never changes
// for a node (go-fuse keys nodes by StableAttr{Mode type, Ino, Gen}).
type node struct {
	fs.Inode
	fsys *fileSystem
	ino  Ino

	// inc is the incarnation of ino the node belongs to (writeback.go).
	inc uint64
	// kept: go-fuse kept this node, and fsys.nodes counts it until
	// OnForget. Guarded by fsys.incMu.
	kept bool

	mu sync.Mutex // guards seen, seenValid, opens, openedOnce, changes and capsGen
	// seen is the data-relevant part of the attributes at the last open
	// (size, mtime, ctime); the kernel's page cache of the file holds
	// data no older than that. It is cleared when this mount changes the
	// file's data, whose new mtime it cannot know without asking. With
	// the writeback cache it is the version the kernel's inode agrees
	// with (writeback.go).
	seen      dataVersion
	seenValid bool
	seenAt    uint64 // the mount's count of its changes of the file (writes) when seen was taken
	// opens counts the node's open files in this mount; openedOnce
	// says whether it ever had one; changes counts this mount's changes
	// of its data (dataChanged).
	opens      int
	openedOnce bool
	changes    uint64

	// lookedUp is when a lookup last returned this node (Unix
	// nanoseconds), or 0 once a call on the node has succeeded since.
	lookedUp atomic.Int64

	// mode and nlink are those of the last attributes seen for the node.
	mode  atomic.Uint32
	nlink atomic.Uint32
	// gone: this mount removed the file's last name (writeback.go,
	// unlinked).
	gone atomic.Bool
	// noCapsUntil is until when (monoNow) the file is known to have no
	// security.capability (noCaps); 0: not known. capsGen counts this
	// mount's changes of that xattr; both are written under mu.
	noCapsUntil atomic.Int64
	capsGen     uint64

	locks lockTable // fcntl and flock locks of this mount's opens

	wb writeBehind // writes not yet at the target (writebehind.go)
}

// dataVersion is what tells an open whether the kernel's cached pages of
// a file are still the target's data.
type dataVersion struct {
	size         uint64
	mtime, ctime time.Time
}

func versionOf(a *Attr) dataVersion {
	return dataVersion{size: a.Size, mtime: a.Mtime, ctime: a.Ctime}
}

func (v dataVersion) equal(w dataVersion) bool {
	return v.size == w.size && v.mtime.Equal(w.mtime) && v.ctime.Equal(w.ctime)
}

// One assertion per go-fuse interface the node implements.
var (
	_ = (fs.InodeEmbedder)((*node)(nil))
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeTmpfiler)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeReleaser)((*node)(nil))
	_ = (fs.NodeReader)((*node)(nil))
	_ = (fs.NodeWriter)((*node)(nil))
	_ = (fs.NodeFsyncer)((*node)(nil))
	_ = (fs.NodeFlusher)((*node)(nil))
	_ = (fs.NodeAllocater)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.NodeAccesser)((*node)(nil))
	_ = (fs.NodeCopyFileRanger)((*node)(nil))
)

// accesser is a Client that answers access(2) (*capfs.Client.Access).
type accesser interface {
	Access(ctx context.Context, ino Ino, mask uint32) error
}

var _ accesser = (*capfs.Client)(nil)

// Access answers access(2), faccessat(2) and chdir(2): the target
// decides, as the caller. A Client without Access gets ENOSYS, which
// the kernel takes as "no checks" from then on.
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	a, ok := n.fsys.c.(accesser)
	if !ok {
		return syscall.ENOSYS
	}
	return errnoOf(a.Access(opContext(ctx), n.ino, mask))
}

// opContext is the context a client call runs under. It carries the
// caller's credentials (callerOf), which the target checks access
// against, but not the kernel's interrupt: the kernel
// interrupts a request whenever the calling thread gets any signal (Go
// programs get SIGURG all the time), and a create or rename the target
// has done must not turn into EINTR. Every client call is bounded by
// the client's reconnect timeout instead, so none hangs for ever.
//
// The context of a caller is made once and kept with its credential
// (cred.go): a request allocates nothing for it.
func opContext(ctx context.Context) context.Context {
	if c := callerOf(ctx); c != nil {
		return c.ctx
	}
	return context.WithoutCancel(ctx)
}

// handleContext is opContext for I/O through an open file: it runs for
// the credentials that opened it, as a file descriptor keeps its
// opener's (a process that opened a file and then dropped privileges
// still reads and writes it; the target lets a handle's credential do
// what the handle was opened for).
func handleContext(ctx context.Context, f fs.FileHandle) context.Context {
	if fh, ok := f.(*fileHandle); ok && fh.opener != nil {
		return fh.opener.ctx
	}
	return opContext(ctx)
}

// errnoOf returns the errno the kernel gets for err: the syscall.Errno
// the client's error is or wraps, else EIO.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EIO
}

// freshLookup bounds how long ago a lookup that returned a node may
// have been for it to count as just done; see staleOf.
const freshLookup = time.Second

// staleOf is errnoOf for calls on an inode the kernel found by path
// (stat, open, readlink, opendir). ENOENT there usually means that
// another client removed the inode while the kernel cached its name:
// ESTALE makes the kernel look the path up again and retry, once. But
// when the node comes straight from a lookup, with no call on it since,
// that retry has already happened (or the inode went in the instant
// between), and the answer is ENOENT.
func (n *node) staleOf(err error) syscall.Errno {
	e := errnoOf(err)
	if e != syscall.ENOENT {
		return e
	}
	if t := n.lookedUp.Load(); t != 0 && time.Since(time.Unix(0, t)) < freshLookup {
		return syscall.ENOENT
	}
	return syscall.ESTALE
}

// used records a successful call on the node after its lookup.
func (n *node) used() {
	if n.lookedUp.Load() != 0 {
		n.lookedUp.Store(0)
	}
}

func checkName(name string) syscall.Errno {
	if len(name) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	return 0
}

// caller returns the uid and gid of the process behind the request.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// fillAttr converts the target's attributes to the kernel's.
func fillAttr(out *fuse.Attr, a *Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Owner = fuse.Owner{Uid: a.Uid, Gid: a.Gid}
	out.Rdev = a.Rdev
	// A nonzero Blksize keeps go-fuse from replacing Blocks with the
	// size rounded up, so holes show in st_blocks.
	out.Blksize = 4096
	out.Atime, out.Atimensec = timeParts(a.Atime)
	out.Mtime, out.Mtimensec = timeParts(a.Mtime)
	out.Ctime, out.Ctimensec = timeParts(a.Ctime)
}

func timeParts(t time.Time) (uint64, uint32) {
	if t.IsZero() {
		return 0, 0
	}
	return uint64(t.Unix()), uint32(t.Nanosecond())
}

// newChild returns the node for a, filling out; go-fuse hands back the
// node it already has when a is an inode it knows.
//
// The kernel takes the attributes of an entry as the inode's, size
// included: a node with writes still in the mount (writebehind.go) sends
// them first and answers with the attributes after them, or the kernel
// would cut its cached file to the size before.
func (n *node) newChild(ctx context.Context, a *Attr, out *fuse.EntryOut) *fs.Inode {
	child := n.newNode(ctx, a)
	if c, ok := child.Operations().(*node); ok {
		if n.fsys.writeBehind && c.wb.pending() {
			c.drain(false)
			if b, err := n.fsys.c.GetAttr(opContext(ctx), a.Ino); err == nil && b.Gen == a.Gen {
				*a = b
			}
		}
		c.lookedUp.Store(time.Now().UnixNano())
		c.mode.Store(a.Mode)
		c.nlink.Store(a.Nlink)
	}
	fillAttr(&out.Attr, a)
	out.SetEntryTimeout(n.entryTimeoutIn())
	return child
}

// newNode returns a node of ino's current incarnation for the target's
// attributes a, whose kernel inode starts from a (with the writeback
// cache, the version it agrees with). go-fuse hands the kernel the node
// it has for the same StableAttr instead, if any (known keeps that one
// up to date).
func (n *node) newNode(ctx context.Context, a *Attr) *fs.Inode {
	inc, gen := n.fsys.stableGen(a.Ino, a.Gen)
	made := &node{fsys: n.fsys, ino: a.Ino, inc: inc}
	if n.fsys.writeback {
		made.seen, made.seenValid, made.seenAt = versionOf(a), true, n.fsys.writes(a.Ino)
	}
	ch := n.NewInode(ctx, made, fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: uint64(a.Ino), Gen: gen})
	if k, ok := ch.Operations().(*node); ok {
		n.fsys.keep(k)
	}
	return ch
}

// childNode returns the node the name leads to in go-fuse's tree when it
// is inode ino, nil otherwise.
func (n *node) childNode(name string, ino Ino) *node {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	if c, ok := ch.Operations().(*node); ok && c.ino == ino {
		return c
	}
	return nil
}

// known brings the node the name already leads to, if it is the file of
// the target's attributes a, up to date with them, before a lookup
// answers with a: when it was looked up (staleOf), its mode and link
// count, and, with the writeback cache, a new incarnation when another
// client changed the file's data since the kernel's inode agreed with
// the target (writeback.go). newChild sets the same on the node it
// makes, which go-fuse drops for the one it has when the StableAttr is
// the same, so without this a node kept its first lookup's.
func (n *node) known(name string, a *Attr) {
	c := n.childNode(name, a.Ino)
	if c == nil {
		return
	}
	c.lookedUp.Store(time.Now().UnixNano())
	c.mode.Store(a.Mode)
	c.nlink.Store(a.Nlink)
	if c.outdated(a) {
		n.fsys.retire(c)
	}
}

// entryTimeoutIn is how long the kernel may cache a name in the
// directory n. Without default_permissions the kernel checks nothing
// when it walks a path through names it has cached, so on a mount that
// serves other users a cached name in a directory some user may not
// search would let that user through without the target's check: such
// names are not cached (every walk through them is a LOOKUP, checked as
// its caller). A directory everyone may search (all three x bits) gives
// its names the mount's entry timeout.
func (n *node) entryTimeoutIn() time.Duration {
	if n.fsys.guardedEntries && n.mode.Load()&0o111 != 0o111 {
		return 0
	}
	return n.fsys.entryTimeout
}

// dataChanged records that this mount changed the file's data.
func (n *node) dataChanged() {
	n.fsys.wrote(n.ino)
	n.mu.Lock()
	n.seenValid = false
	n.changes++
	n.mu.Unlock()
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	a, err := n.fsys.c.Lookup(opContext(ctx), n.ino, name)
	if err != nil {
		return nil, errnoOf(err)
	}
	n.known(name, &a)
	return n.newChild(ctx, &a, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.drain(false)
	a, err := n.fsys.c.GetAttr(opContext(ctx), n.ino)
	if err != nil {
		return n.staleOf(err)
	}
	if a.Nlink == 0 && f == nil {
		// Not open in this mount (go-fuse passes an open file if there is
		// one), so the kernel came by a name that no longer leads here.
		return n.staleOf(syscall.ENOENT)
	}
	n.used()
	n.mode.Store(a.Mode)
	n.nlink.Store(a.Nlink)
	fillAttr(&out.Attr, &a)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var s SetAttr
	set := false
	if m, ok := in.GetMode(); ok {
		s.Mode, set = &m, true
	}
	if u, ok := in.GetUID(); ok {
		s.Uid, set = &u, true
	}
	if g, ok := in.GetGID(); ok {
		s.Gid, set = &g, true
	}
	if sz, ok := in.GetSize(); ok {
		s.Size, set = &sz, true
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		set = true
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			s.AtimeNow = true
		} else {
			t := time.Unix(int64(in.Atime), int64(in.Atimensec))
			s.Atime = &t
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		set = true
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 || n.fsys.writeback && wbTimes(in) {
			s.MtimeNow = true
		} else {
			t := time.Unix(int64(in.Mtime), int64(in.Mtimensec))
			s.Mtime = &t
		}
	}
	var a Attr
	var err error
	n.drain(false)
	switch {
	case n.fsys.writeback && timesOnly(in) && n.gone.Load():
		// The kernel's write-back of the ctime the unlink gave the
		// inode (fuse_update_ctime): the target removed the file
		// (writeback.go, unlinked).
		set = false
		a = Attr{Ino: n.ino, Mode: n.mode.Load()}
	case set:
		octx := opContext(ctx)
		if s.Size != nil && f != nil {
			octx = handleContext(ctx, f) // ftruncate: the opener's right to write
		}
		if s.Size != nil {
			n.fsys.wrote(n.ino)
		}
		a, err = n.fsys.c.SetAttr(octx, n.ino, s)
		if s.Size != nil && !n.fsys.writeback {
			n.dataChanged()
		}
	default:
		a, err = n.fsys.c.GetAttr(opContext(ctx), n.ino)
	}
	if err != nil && n.fsys.writeback && errnoOf(err) == syscall.ENOENT && timesOnly(in) {
		// The kernel writes back the times it keeps of a file it wrote
		// (fuse_write_inode) also after the file was removed, at a
		// syncfs or when it drops the inode: a file that is gone has
		// no times to keep. (A utimensat racing another client's
		// unlink succeeds too.)
		a, err = Attr{Ino: n.ino, Mode: n.mode.Load()}, nil
	}
	if err != nil {
		return n.staleOf(err)
	}
	if set && n.fsys.writeback {
		// The kernel applied the same change to its inode.
		n.agree(&a, in.Valid&fuse.FATTR_MTIME != 0)
	}
	n.mode.Store(a.Mode)
	n.nlink.Store(a.Nlink)
	fillAttr(&out.Attr, &a)
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, nil, 0, e
	}
	uid, gid := caller(ctx)
	sent := monoNow()
	a, h, err := n.fsys.c.Create(opContext(ctx), n.ino, name, mode, uid, gid, int(flags))
	if err != nil {
		return nil, nil, 0, errnoOf(err)
	}
	// The open file goes to the node go-fuse keeps: the one the name
	// leads to already, when it was there (an existing file opened
	// with O_CREAT), else the new one.
	c := n.childNode(name, a.Ino)
	child := n.newChild(ctx, &a, out)
	if c == nil {
		c, _ = child.Operations().(*node)
	}
	if c != nil {
		c.opened()
		if flags&syscall.O_EXCL != 0 {
			_, gen := c.capsQuery()
			c.capsAbsent(sent, gen) // a file just made has none
		}
	}
	return child, newFileHandle(ctx, h, flags), 0, 0
}

// Tmpfile makes an unnamed file (open with O_TMPFILE): the target has
// no such operation, so it creates the file under a unique hidden name
// and unlinks it at once, keeping it open. Other clients can see the
// name for that moment.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf(".capsule-tmpfile-%x", r)
	uid, gid := caller(ctx)
	octx := opContext(ctx)
	flags &^= syscall.O_TRUNC | unix.O_TMPFILE
	a, h, err := n.fsys.c.Create(octx, n.ino, name, syscall.S_IFREG|mode&0o7777, uid, gid, int(flags)|syscall.O_CREAT|syscall.O_EXCL)
	if err != nil {
		return nil, nil, 0, errnoOf(err)
	}
	if err := n.fsys.c.Unlink(octx, n.ino, name); err != nil {
		_ = n.fsys.c.Release(octx, a.Ino, h)
		return nil, nil, 0, errnoOf(err)
	}
	a.Nlink = 0
	fillAttr(&out.Attr, &a)
	out.SetEntryTimeout(n.entryTimeoutIn())
	child := n.newNode(ctx, &a)
	if c, ok := child.Operations().(*node); ok {
		c.mode.Store(a.Mode)
		c.opened()
	}
	return child, newFileHandle(ctx, h, flags), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	uid, gid := caller(ctx)
	a, err := n.fsys.c.Mkdir(opContext(ctx), n.ino, name, mode, uid, gid)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.newChild(ctx, &a, out), 0
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	uid, gid := caller(ctx)
	a, err := n.fsys.c.Mknod(opContext(ctx), n.ino, name, mode, dev, uid, gid)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.newChild(ctx, &a, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	uid, gid := caller(ctx)
	a, err := n.fsys.c.Symlink(opContext(ctx), n.ino, name, target, uid, gid)
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.newChild(ctx, &a, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.fsys.c.Readlink(opContext(ctx), n.ino)
	if err != nil {
		return nil, n.staleOf(err)
	}
	n.used()
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	a, err := n.fsys.c.Link(opContext(ctx), t.ino, n.ino, name)
	if err != nil {
		return nil, errnoOf(err)
	}
	t.nlink.Store(a.Nlink)
	return n.newChild(ctx, &a, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	err := n.fsys.c.Unlink(opContext(ctx), n.ino, name)
	if err == nil && n.fsys.writeback {
		if c, ok := n.GetChild(name).Operations().(*node); ok {
			c.unlinked()
		}
	}
	return errnoOf(err)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return errnoOf(n.fsys.c.Rmdir(opContext(ctx), n.ino, name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := checkName(newName); e != 0 {
		return e
	}
	p, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	return errnoOf(n.fsys.c.Rename(opContext(ctx), n.ino, name, p.ino, newName, flags))
}

// Open gets the file's attributes from the target with the open (an
// inode without links is treated as gone, see staleOf),
// as NFS does for close-to-open consistency: when the size, mtime or
// ctime differ from those at the last open through this mount (or this
// mount wrote the file since), the kernel drops its cached pages (no
// FOPEN_KEEP_CACHE) and its cached attributes; otherwise it keeps both.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.drain(false) // before an O_TRUNC, and so the attributes include them
	octx := opContext(ctx)
	written := n.fsys.writes(n.ino) // before the attributes: they include what it counts
	h, a, err := n.openAttr(octx, int(flags))
	if err != nil {
		return nil, 0, n.staleOf(err)
	}
	if a.Nlink == 0 {
		// Still open somewhere, but no name leads to it any more: the
		// kernel's cached name is stale.
		_ = n.fsys.c.Release(octx, n.ino, h)
		return nil, 0, n.staleOf(syscall.ENOENT)
	}
	v := versionOf(&a)
	if n.stale(v) {
		// Another client changed the file since the kernel's inode
		// agreed with the target: retry on a new one (writeback.go).
		_ = n.fsys.c.Release(octx, n.ino, h)
		n.fsys.retire(n)
		return nil, 0, syscall.ESTALE
	}
	n.used()
	n.mu.Lock()
	keep := n.seenValid && n.seen.equal(v)
	if !n.wbFile() || n.opens == 0 {
		n.seen, n.seenValid, n.seenAt = v, true, written
	}
	n.mu.Unlock()
	n.opened()
	fh := newFileHandle(ctx, h, flags)
	if keep {
		return fh, fuse.FOPEN_KEEP_CACHE, 0
	}
	// Attributes only (offset -1): the pages go because the reply lacks
	// FOPEN_KEEP_CACHE. ENOENT means the kernel holds nothing to drop.
	_ = n.NotifyContent(-1, 0)
	return fh, 0, 0
}

// openAttr opens the inode and returns the attributes as of the open:
// in one round trip where the client can, else GETATTR first.
func (n *node) openAttr(ctx context.Context, flags int) (Handle, Attr, error) {
	if oa, ok := n.fsys.c.(openAttrer); ok {
		return oa.OpenAttr(ctx, n.ino, flags)
	}
	a, err := n.fsys.c.GetAttr(ctx, n.ino)
	if err != nil {
		return 0, Attr{}, err
	}
	h, err := n.fsys.c.Open(ctx, n.ino, flags)
	return h, a, err
}

// fileHandle is an open file: the target's handle for it, and the
// credential that opened it (nil: the request named none), with the
// context its I/O runs under.
type fileHandle struct {
	h      Handle
	opener *preparedCred
	// behind: writes may be buffered (opened without O_DIRECT, O_SYNC
	// or O_DSYNC; writebehind.go).
	behind bool
	// writeOnly: opened O_WRONLY. With the writeback cache the kernel
	// reads through such a file to fill the pages a write covers in
	// part, which the opener may have no right to read: those reads
	// run with the mount's own credentials (the data goes to the page
	// cache, which the write-only file cannot read back).
	writeOnly bool
}

func newFileHandle(ctx context.Context, h Handle, flags uint32) *fileHandle {
	return &fileHandle{h: h, opener: callerOf(ctx), behind: flags&(syscall.O_DIRECT|syscall.O_DSYNC) == 0,
		writeOnly: flags&syscall.O_ACCMODE == syscall.O_WRONLY}
}

func handleOf(f fs.FileHandle) Handle {
	if fh, ok := f.(*fileHandle); ok {
		return fh.h
	}
	return 0
}

func (n *node) Release(ctx context.Context, f fs.FileHandle) syscall.Errno {
	// A failure still unreported has no one left to go to: the last
	// close (Flush) has returned.
	n.drain(false)
	if fh, ok := f.(*fileHandle); ok {
		n.locks.releaseAll(fh)
	}
	err := n.fsys.c.Release(opContext(ctx), n.ino, handleOf(f))
	n.released(opContext(ctx))
	return errnoOf(err)
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.drain(false)
	rctx := handleContext(ctx, f)
	if fh, ok := f.(*fileHandle); ok && fh.writeOnly && n.fsys.writeback {
		rctx = context.Background() // a page fill (writeOnly above)
	}
	if bc, ok := n.fsys.c.(bufferer); ok && len(dest) >= zeroCopyMin && len(dest) <= capfs.BufferSize {
		if b := bc.Buffer(); b != nil {
			m, err := n.fsys.c.Read(rctx, n.ino, handleOf(f), b.Bytes()[:len(dest)], off)
			if err != nil {
				b.Release()
				return nil, errnoOf(err)
			}
			return &bufferResult{b: b, n: m}, 0
		}
	}
	m, err := n.fsys.c.Read(rctx, n.ino, handleOf(f), dest, off)
	if err != nil {
		return nil, errnoOf(err)
	}
	return fuse.ReadResultData(dest[:m]), 0
}

// zeroCopyMin is the smallest read served from the client's registered
// buffers (capfs.Client.Buffer): the target writes the data there and
// the reply to the kernel is written from there, where a copy into
// go-fuse's buffer cost about 90 µs of a 1 MiB read. Smaller reads copy,
// which costs less than a buffer's round trip through the pool.
const zeroCopyMin = 64 << 10

// bufferResult is read data in a registered buffer, written to the
// kernel from there and released after (go-fuse calls Done once the
// reply is written or dropped). Slices makes go-fuse write it as it
// stands, without flattening it with Bytes.
type bufferResult struct {
	b *capfs.Buffer
	n int
}

func (r *bufferResult) Size() int { return r.n }
func (r *bufferResult) Done()     { r.b.Release() }

// Bytes copies: whoever flattens a result may call Done before it uses
// the bytes.
func (r *bufferResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	return append(buf[:0], r.b.Bytes()[:r.n]...), fuse.OK
}

// Slices is go-fuse's vectored read result (fuse.withSlice).
func (r *bufferResult) Slices() ([][]byte, fuse.Status) {
	return [][]byte{r.b.Bytes()[:r.n]}, fuse.OK
}

// Write buffers small writes (writebehind.go) and sends the rest to
// the target, after what is buffered.
func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.fsys.wrote(n.ino) // before the target has it too (writeback.go)
	fh, _ := f.(*fileHandle)
	if n.fsys.behind(fh, len(data)) {
		if m, e, ok := n.bufferWrite(fh, data, off); ok {
			n.dataChanged()
			return m, e
		}
	}
	if e := n.drain(true); e != 0 {
		return 0, e
	}
	m, err := n.fsys.c.Write(handleContext(ctx, f), n.ino, handleOf(f), data, off)
	n.dataChanged()
	if err != nil && m == 0 {
		return 0, errnoOf(err)
	}
	return uint32(m), 0
}

// Flush, at every close, sends what the inode buffered and reports a
// buffered write that failed: after a close, the next open anywhere sees
// the data.
func (n *node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno {
	if e := n.drain(true); e != 0 {
		return e
	}
	n.flushed(opContext(ctx))
	return 0
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if e := n.drain(true); e != 0 {
		return e
	}
	return errnoOf(n.fsys.c.Fsync(handleContext(ctx, f), n.ino, handleOf(f), flags&1 != 0))
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	n.drain(false)
	n.fsys.wrote(n.ino)
	err := n.fsys.c.Fallocate(handleContext(ctx, f), n.ino, handleOf(f), mode, int64(off), int64(size))
	n.dataChanged()
	return errnoOf(err)
}

// CopyFileRange copies inside the target (COPYRANGE), so the bytes of
// copy_file_range(2) cross neither the network nor this process. It runs
// with the credentials that opened the destination; a client without
// the operation answers ENOSYS, and the kernel copies through the page
// cache instead. The kernel writes back both files' dirty pages of the
// ranges first and drops the destination's after.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle,
	offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	cp, ok := n.fsys.c.(copier)
	dst, isNode := out.Operations().(*node)
	if !ok || !isNode {
		return 0, syscall.ENOSYS
	}
	if flags != 0 {
		return 0, syscall.EINVAL
	}
	n.drain(false)
	dst.drain(false)
	n.fsys.wrote(dst.ino)
	m, err := cp.CopyFileRange(handleContext(ctx, fhOut), n.ino, int64(offIn), dst.ino, int64(offOut), int64(min(length, math.MaxUint32&^(4<<10-1))))
	if m > 0 {
		dst.dataChanged()
	}
	if err != nil && m == 0 {
		return 0, errnoOf(err)
	}
	return uint32(m), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	s, err := n.fsys.c.StatFS(opContext(ctx))
	if err != nil {
		return errnoOf(err)
	}
	*out = fuse.StatfsOut{
		Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail,
		Files: s.Files, Ffree: s.Ffree,
		Bsize: s.Bsize, Frsize: s.Frsize, NameLen: s.NameLen,
	}
	return 0
}

// xattrReply answers a size query (empty dest) with the size, and
// copies v into dest when it fits (ERANGE otherwise), as getxattr(2)
// and listxattr(2) do.
func xattrReply(v, dest []byte) (uint32, syscall.Errno) {
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// The kernel asks for security.capability before the first write after
// it refreshed a file's attributes and before every chown, to learn
// whether it must remove the file's capabilities (its killpriv check):
// two of the ten round trips each file of an untar costs. The target
// drops capabilities itself on write, truncate and chown
// (CAP_HANDLE_KILLPRIV_V2), so the answer decides nothing there; it is
// cached as the kernel caches attributes. A file made here with O_EXCL
// has none, and a GETXATTR that found none holds for attrTimeout from
// when it was sent; this mount's own SETXATTR or REMOVEXATTR of the name
// forgets it. Another client's setcap shows here within attrTimeout, as
// its chmod does.
const capsXattr = "security.capability"

// monoEpoch anchors monoNow.
var monoEpoch = time.Now()

// monoNow is a monotonic clock in nanoseconds, for cache deadlines.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// noCaps reports whether n is known to have no security.capability.
func (n *node) noCaps() bool {
	until := n.noCapsUntil.Load()
	return until != 0 && monoNow() < until
}

// capsQuery returns the monotonic time and this mount's count of its
// changes of n's security.capability, taken before a call that may find
// it absent.
func (n *node) capsQuery() (t int64, gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return monoNow(), n.capsGen
}

// capsAbsent records that a call sent at (t, gen) of capsQuery found no
// security.capability, unless this mount changed it since.
func (n *node) capsAbsent(t int64, gen uint64) {
	d := n.fsys.attrTimeout
	if d <= 0 {
		return
	}
	n.mu.Lock()
	if n.capsGen == gen {
		n.noCapsUntil.Store(t + int64(d))
	}
	n.mu.Unlock()
}

// capsChanging forgets what noCaps knows, before this mount changes n's
// security.capability.
func (n *node) capsChanging() {
	n.mu.Lock()
	n.capsGen++
	n.noCapsUntil.Store(0)
	n.mu.Unlock()
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	caps := attr == capsXattr
	if caps && n.noCaps() {
		return 0, syscall.ENODATA
	}
	n.drain(false) // a write drops security.capability
	var sent int64
	var gen uint64
	if caps {
		sent, gen = n.capsQuery()
	}
	v, err := n.fsys.c.GetXattr(opContext(ctx), n.ino, attr)
	if err != nil {
		e := errnoOf(err)
		if caps && e == syscall.ENODATA {
			n.capsAbsent(sent, gen)
		}
		return 0, e
	}
	return xattrReply(v, dest)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	n.drain(false)
	if attr == capsXattr {
		n.capsChanging()
	}
	return errnoOf(n.fsys.c.SetXattr(opContext(ctx), n.ino, attr, data, flags))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	n.drain(false)
	names, err := n.fsys.c.ListXattr(opContext(ctx), n.ino)
	if err != nil {
		return 0, errnoOf(err)
	}
	var v []byte
	for _, name := range names {
		v = append(append(v, name...), 0)
	}
	return xattrReply(v, dest)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	n.drain(false)
	if attr == capsXattr {
		n.capsChanging()
	}
	return errnoOf(n.fsys.c.RemoveXattr(opContext(ctx), n.ino, attr))
}
