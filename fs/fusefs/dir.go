package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirPage is how many entries an open directory asks the client for at
// a time; the client pages through the target in as many round trips
// as it needs.
const dirPage = 512

// dirHandle is an open directory. It lists the directory in pages of
// READDIRPLUS entries, each page resuming at the cookie of the entry
// before it, so a directory of any size lists completely with bounded
// memory, and a kernel offset (the cookie of the entry before) seeks
// straight back into it. The attributes that come with each entry
// answer the kernel's READDIRPLUS lookups without another round trip.
//
// go-fuse calls a handle's methods one at a time (under the open
// file's lock), so dirHandle needs no lock of its own.
type dirHandle struct {
	n      *node
	h      Handle // the target's handle, when open
	open   bool
	cookie uint64     // where the next page starts
	page   []DirEntry // the current page
	pos    int        // next entry of page to hand out
	eof    bool       // the client reported the directory's end
	last   *DirEntry  // the entry Readdirent handed out last
}

var (
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileLookuper)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
)

// OpendirHandle opens a directory for listing. The kernel's directory
// cache is not used (no FOPEN_CACHE_DIR): every listing asks the target,
// so entries other clients made or removed show at once.
//
// The directory is opened on the target too, when the target keeps
// handles of directories, so that an open directory that is removed or
// renamed over stays valid for fstat until it is closed.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, err := n.fsys.c.Open(opContext(ctx), n.ino, syscall.O_RDONLY|syscall.O_DIRECTORY)
	switch e := errnoOf(err); e {
	case 0:
		n.used()
		return &dirHandle{n: n, h: h, open: true}, 0, 0
	case syscall.EISDIR:
		return &dirHandle{n: n}, 0, 0
	default:
		return nil, 0, n.staleOf(err)
	}
}

func (d *dirHandle) fill(ctx context.Context) syscall.Errno {
	d.page, d.pos = d.page[:0], 0
	err := d.n.fsys.c.ReadDir(opContext(ctx), d.n.ino, d.cookie, true, func(e DirEntry) bool {
		d.page = append(d.page, e)
		return len(d.page) < dirPage
	})
	if err != nil {
		return d.n.staleOf(err)
	}
	if len(d.page) < dirPage {
		d.eof = true
	}
	if len(d.page) > 0 {
		d.cookie = d.page[len(d.page)-1].Cookie
	}
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.pos == len(d.page) {
		if d.eof {
			return nil, 0
		}
		if e := d.fill(ctx); e != 0 {
			return nil, e
		}
		if len(d.page) == 0 {
			return nil, 0
		}
	}
	e := &d.page[d.pos]
	d.pos++
	d.last = e
	return &fuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: e.Mode, Off: e.Cookie}, 0
}

// Lookup answers READDIRPLUS for the entry just handed out from the
// attributes the listing brought; without them it asks the target.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := d.last; e != nil && e.Name == name && e.Attr.Ino == e.Ino && e.Ino != 0 {
		d.n.known(name, &e.Attr)
		return d.n.newChild(ctx, &e.Attr, out), 0
	}
	return d.n.Lookup(ctx, name, out)
}

// Seekdir moves to just after the entry whose cookie is off (0: the
// start).
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.cookie, d.page, d.pos, d.eof, d.last = off, d.page[:0], 0, false, nil
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	if d.open {
		_ = d.n.fsys.c.Release(opContext(ctx), d.n.ino, d.h)
	}
}

// Fsyncdir makes the directory's entries durable on the target: an FSYNC
// of the directory, which the target's durability rule (fs/server's
// doc.go) makes a sync of the namespace.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return errnoOf(d.n.fsys.c.Fsync(opContext(ctx), d.n.ino, d.h, flags&1 != 0))
}
