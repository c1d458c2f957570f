package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
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
// A node's seen version is that agreement: the target's size and mtime
// (sameData: every change of a file's data moves them) when the kernel's
// inode was made (newNode), or when this mount last knew the target had
// everything it wrote (the close of the last file of it open here, a
// setattr with none open), carried over every setattr the kernel made
// while it agreed (agree). A file this mount has written since has no
// seen version (seenValid false): the kernel's inode is then the newer
// one, and is kept. This mount's changes of a file are also counted per
// inode before they are sent (wrote), and a version taken before the
// last of them is not trusted, so that no node takes a change made here,
// through another node of the same file, for another client's.
//
// When an open or a lookup finds the target's version different from
// the seen one, the node is retired: the inode number's incarnation goes
// up, and the next lookup of any of its names makes a node of the new
// incarnation, a new node ID for the kernel, whose inode starts from the
// target's attributes. A lookup answers with that node, so the kernel drops the
// name's old dentry for it (a stat sees the change once the kernel's
// cached entry expires, as with any attribute cache). An open answers
// ESTALE, which makes the kernel walk the path again with revalidation
// (do_filp_open's LOOKUP_REVAL retry), find the new node ID behind the
// name, drop its old dentry and open the new inode, however fresh the
// cached entry. Files already open keep the old inode, and what they
// see, as the reads of an open file on NFS may. The incarnation is
// folded into the node's StableAttr.Gen, so stat's st_ino stays the
// target's.

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

// keep counts n, a node go-fuse kept, among its inode number's nodes,
// once. With every node of an inode number forgotten (OnForget), its
// write count goes: no kernel inode is left to agree or disagree with
// the target, so the next node starts afresh, and the map holds only
// the inodes the kernel knows, not every one the mount ever wrote. The
// incarnation goes too once the node of the current one has been opened:
// until then the kernel may still be on its way to the retry an ESTALE
// asked for (it forgets the retired inode before it looks the name up
// again), and that retry must get a node of a new incarnation, which
// answers its first open (stale). A forget may have dropped the entries
// while n was being made from them, so keep puts back n's own where they
// are lower.
func (fsys *fileSystem) keep(n *node) {
	if !fsys.writeback {
		return
	}
	n.mu.Lock()
	seenAt := n.seenAt
	n.mu.Unlock()
	fsys.incMu.Lock()
	defer fsys.incMu.Unlock()
	if n.kept {
		return
	}
	n.kept = true
	if fsys.nodes == nil {
		fsys.nodes = make(map[Ino]int)
	}
	fsys.nodes[n.ino]++
	if n.inc > fsys.inc[n.ino] {
		if fsys.inc == nil {
			fsys.inc = make(map[Ino]uint64)
		}
		fsys.inc[n.ino] = n.inc
	}
	if seenAt > fsys.written[n.ino] {
		if fsys.written == nil {
			fsys.written = make(map[Ino]uint64)
		}
		fsys.written[n.ino] = seenAt
	}
}

var _ fs.NodeOnForgetter = (*node)(nil)

// OnForget implements fs.NodeOnForgetter: the kernel has forgotten n
// (keep).
func (n *node) OnForget() {
	fsys := n.fsys
	n.mu.Lock()
	served := n.openedOnce
	n.mu.Unlock()
	fsys.incMu.Lock()
	defer fsys.incMu.Unlock()
	if !n.kept {
		return
	}
	n.kept = false
	if fsys.nodes[n.ino]--; fsys.nodes[n.ino] > 0 {
		return
	}
	delete(fsys.nodes, n.ino)
	delete(fsys.written, n.ino)
	if served && n.inc == fsys.inc[n.ino] {
		delete(fsys.inc, n.ino)
	}
}

// wbFile reports whether n is a regular file whose size and times the
// kernel keeps itself.
func (n *node) wbFile() bool {
	return n.fsys.writeback && n.mode.Load()&syscall.S_IFMT == syscall.S_IFREG
}

// stale reports, for an open that found the target's version v, whether
// the kernel's inode may hold another client's old size or times and
// the open must go to a new node: the mount knows the version the kernel
// agrees with, it has changed none of the file's data since, through
// any node of it (writes), and the target's version differs. A file
// open here keeps the old inode for its own reads; the new open gets a
// new one. A node that a retirement made answers its first open
// in any case: the kernel retries an open that got ESTALE only once, and
// that node's inode comes from the lookup of that retry (a change since
// then is a race the next open sees).
func (n *node) stale(v dataVersion) bool {
	if !n.wbFile() {
		return false
	}
	written := n.fsys.writes(n.ino)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inc > 0 && !n.openedOnce {
		return false
	}
	return n.seenValid && n.seenAt == written && !n.seen.sameData(v)
}

// outdated reports, for a lookup that found the target's attributes a,
// whether the kernel's inode may hold another client's old size or
// times: the mount knows the version the kernel agrees with (it has sent
// no write since) and the target's differs.
func (n *node) outdated(a *Attr) bool {
	if !n.wbFile() {
		return false
	}
	written := n.fsys.writes(n.ino)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seenValid && n.seenAt == written && !n.seen.sameData(versionOf(a))
}

// sameData reports whether two versions agree on size and mtime, which
// every change of a file's data moves. ctime is left out: this mount's
// own rename, link or chmod moves it too, and a new inode for those
// would part a file open here from its next opens in the same mount; the
// kernel then shows an old ctime after another client's chmod (mode and
// owner themselves still come from the target).
func (v dataVersion) sameData(w dataVersion) bool {
	return v.size == w.size && v.mtime.Equal(w.mtime)
}

// opened and released count the node's open files.
func (n *node) opened() {
	n.mu.Lock()
	n.opens++
	n.openedOnce = true
	n.mu.Unlock()
}

// wrote counts a change of ino's data by this mount, through any of its
// nodes; the mount counts it before it sends the change and after, so
// that an open that finds the change at the target knows it for this
// mount's own.
func (fsys *fileSystem) wrote(ino Ino) {
	if !fsys.writeback {
		return
	}
	fsys.incMu.Lock()
	defer fsys.incMu.Unlock()
	if fsys.written == nil {
		fsys.written = make(map[Ino]uint64)
	}
	fsys.written[ino]++
}

// writes returns the count of wrote for ino.
func (fsys *fileSystem) writes(ino Ino) uint64 {
	if !fsys.writeback {
		return 0
	}
	fsys.incMu.Lock()
	defer fsys.incMu.Unlock()
	return fsys.written[ino]
}

// flushed is the FLUSH of a close. The kernel writes a file's dirty
// pages back before it sends FLUSH, so at the close of the last file of
// it open here (close(2) waits for FLUSH, and the RELEASE after it comes
// later, asynchronously) the target has all this mount wrote, and its
// version is the one the kernel agrees with again. Taken here, before
// close returns, rather than at the RELEASE, another client's change
// right after the close is not mistaken for this mount's.
func (n *node) flushed(ctx context.Context) {
	n.resync(ctx, 1)
}

// released counts a release; at the last one, a file written through a
// mapping after its last close is resynced the same way.
func (n *node) released(ctx context.Context) {
	n.mu.Lock()
	n.opens = max(n.opens-1, 0)
	n.mu.Unlock()
	n.resync(ctx, 0)
}

// resync records the target's version as the kernel's when this mount
// changed the file's data since they last agreed and at most open files
// of it are open; a change of this mount's while it asks cancels that.
func (n *node) resync(ctx context.Context, open int) {
	if !n.wbFile() {
		return
	}
	written := n.fsys.writes(n.ino)
	n.mu.Lock()
	need, changes := !n.seenValid && n.opens <= open, n.changes
	n.mu.Unlock()
	if !need {
		return
	}
	a, err := n.fsys.c.GetAttr(ctx, n.ino)
	if err != nil {
		return
	}
	n.mu.Lock()
	if n.changes == changes && n.opens <= open {
		n.seen, n.seenValid, n.seenAt = versionOf(&a), true, written
	}
	n.mu.Unlock()
}

// agree records, after a SETATTR that the kernel applied to its inode
// too, the target's attributes a as the version the kernel agrees with.
//
// When the kernel agreed with the seen version before (and this mount
// has sent no data since, not even a truncate), it made the same change
// as the target, so it agrees with a, whether or not files are open:
// the SETATTR that writes back the times the kernel keeps comes often
// while the RELEASE of the last close is still on its way, and a mount
// that stopped trusting its version there took another client's change
// after that close for its own. a is taken only if the data in it is
// the seen data, with the mtime this SETATTR set: else another client
// changed the file since, and the seen version stays, so that the next
// open finds the change. Without a version the kernel is known to agree
// with, a becomes it when no file of the node is open; with files open a
// later write back may change the target again, and the last release
// resyncs.
func (n *node) agree(a *Attr, setMtime bool) {
	written := n.fsys.writes(n.ino)
	n.mu.Lock()
	switch {
	case n.seenValid && n.seenAt == written:
		if a.Size == n.seen.size && (setMtime || a.Mtime.Equal(n.seen.mtime)) {
			n.seen = versionOf(a)
		}
	case n.opens == 0:
		n.seen, n.seenValid, n.seenAt = versionOf(a), true, written
	default:
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
