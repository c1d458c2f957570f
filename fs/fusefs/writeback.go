package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel's writeback cache (doc.go, "Writes"; on with
// Options.WritebackCache). The kernel then holds written pages dirty and
// sends them in large WRITEs when it writes them back, and it keeps a
// regular file's size, mtime and ctime itself: it ignores those the
// target reports for an inode it has. Close-to-open consistency across
// mounts therefore needs a new kernel inode whenever another client
// changed a file since this kernel's inode last agreed with the target.
//
// A node's seen version is that agreement: the target's size, mtime and
// ctime when the kernel's inode was made (newChild), or when this mount
// last knew the target had everything it wrote (the last release of the
// file's open files, a setattr with no file open). A file this mount has
// written and not yet released has no seen version (seenValid false):
// the kernel's inode is then the newer one, and is kept.
//
// When an open finds the target's version different from the seen one,
// the node is retired: the inode number's incarnation goes up, and the
// next lookup of any of its names makes a node of the new incarnation, a
// new node ID for the kernel, whose inode starts from the target's
// attributes. The open answers ESTALE, which makes the kernel walk the
// path again with revalidation (do_filp_open's LOOKUP_REVAL retry), find
// the new node ID behind the name, drop its old dentry and open the new
// inode. Files already open keep the old inode, and what they see, as
// the reads of an open file on NFS may. The incarnation is folded into
// the node's StableAttr.Gen, so stat's st_ino stays the target's. A stat
// of a name whose entry the kernel still caches shows the old inode's
// size until the entry expires or the name is opened.

// incarnationMix spreads an incarnation over the generation's bits.
const incarnationMix = 0x9e3779b97f4a7c15

// stableGen returns the current incarnation of ino and the StableAttr.Gen
// of its node, for the target's generation gen.
func (fsys *fileSystem) stableGen(ino Ino, gen uint64) (inc, stable uint64) {
	if !fsys.writeback {
		return 0, gen
	}
	fsys.incMu.Lock()
	inc = fsys.inc[ino]
	fsys.incMu.Unlock()
	return inc, gen ^ inc*incarnationMix
}

// retire makes the next lookup of n's names make a new node. Even when
// n is an old incarnation already, the retry must find a node that has
// never been opened, which answers it (stale), and not a current one
// that may be stale in turn: the kernel retries once.
func (fsys *fileSystem) retire(n *node) {
	fsys.incMu.Lock()
	defer fsys.incMu.Unlock()
	if fsys.inc == nil {
		fsys.inc = make(map[Ino]uint64)
	}
	fsys.inc[n.ino] = max(fsys.inc[n.ino], n.inc) + 1
}

// wbFile reports whether n is a regular file whose size and times the
// kernel keeps itself.
func (n *node) wbFile() bool {
	return n.fsys.writeback && n.mode.Load()&syscall.S_IFMT == syscall.S_IFREG
}

// stale reports, for an open that found the target's version v, whether
// the kernel's inode may hold another client's old size or times and
// the open must go to a new node: the mount knows the version the kernel
// agrees with (it has sent no write since) and the target's differs. A
// file open here keeps the old inode for its own reads; the new open
// gets a new one. A node that a retirement made answers its first open
// in any case: the kernel retries an open that got ESTALE only once, and
// that node's inode comes from the lookup of that retry (a change since
// then is a race the next open sees).
func (n *node) stale(v dataVersion) bool {
	if !n.wbFile() {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inc > 0 && !n.openedOnce {
		return false
	}
	return n.seenValid && !n.seen.equal(v)
}

// opened and released count the node's open files.
func (n *node) opened() {
	n.mu.Lock()
	n.opens++
	n.openedOnce = true
	n.mu.Unlock()
}

// released counts a release; at the last one of a file this mount wrote,
// the kernel has sent everything (it writes dirty pages back before the
// last RELEASE), so the target's version is the one the kernel agrees
// with again.
func (n *node) released(ctx context.Context) {
	n.mu.Lock()
	n.opens--
	resync := n.opens == 0 && !n.seenValid && n.wbFile()
	n.mu.Unlock()
	if !resync {
		return
	}
	if a, err := n.fsys.c.GetAttr(ctx, n.ino); err == nil {
		n.agree(&a)
	}
}

// agree records that the kernel's inode agrees with the target's
// attributes a, when no file of the node is open (else a later write
// back may change the target again, and the last release resyncs).
func (n *node) agree(a *Attr) {
	n.mu.Lock()
	if n.opens == 0 {
		n.seen, n.seenValid = versionOf(a), true
	} else {
		n.seenValid = false
	}
	n.mu.Unlock()
}

// wbTimes turns the times of a SETATTR into what the target should do
// when the kernel keeps mtime and ctime itself. With the writeback cache
// the kernel sends mtime as a value even when the caller asked for the
// current time (utimensat with UTIME_NOW or no times, truncate, the
// times of a write it flushes), and adds ctime (FATTR_CTIME); those
// carry the same instant for mtime and ctime, which an explicit mtime
// from utimensat does not. So an mtime equal to the ctime beside it is
// "now": whoever may write may set it, where an explicit time needs the
// owner.
func wbTimes(in *fuse.SetAttrIn) (mtimeNow bool) {
	return in.Valid&fuse.FATTR_CTIME != 0 && in.Valid&fuse.FATTR_MTIME != 0 &&
		in.Mtime == in.Ctime && in.Mtimensec == in.Ctimensec
}

// timesOnly reports whether a SETATTR changes nothing but times.
func timesOnly(in *fuse.SetAttrIn) bool {
	const times = fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW | fuse.FATTR_CTIME | fuse.FATTR_FH | fuse.FATTR_LOCKOWNER
	return in.Valid&times != 0 && in.Valid&^times == 0
}

// unlinked records that this mount removed one of the file's names. When
// that was its last, as the mount last saw it, the target removed the
// file, or keeps it, nameless, for the files open on it. With the
// writeback cache the kernel then writes back the ctime the unlink gave
// its inode, which the mount answers itself (Setattr) instead of asking
// the target about a file that is gone or that no one can name; the
// kernel keeps the times of such a file for fstat itself.
func (n *node) unlinked() {
	if !n.wbFile() {
		return
	}
	if l := n.nlink.Load(); l != 1 {
		n.nlink.Store(max(l, 1) - 1)
		return
	}
	n.nlink.Store(0)
	n.gone.Store(true)
}
