package server

import (
	"bytes"
	"encoding/binary"
	"syscall"

	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// The metadata operations. Each runs in one transaction, so it
// happens wholly or not at all, also across a crash; chunks of files
// whose last link went are deleted after the commit (a crash in between
// leaves them to the orphan sweep).

const maxNlink = 1<<31 - 1

// checkName refuses names no entry can have.
func checkName(name []byte) syscall.Errno {
	switch {
	case len(name) == 0:
		return syscall.ENOENT
	case len(name) > proto.MaxName:
		return syscall.ENAMETOOLONG
	case bytes.IndexByte(name, '/') >= 0 || bytes.IndexByte(name, 0) >= 0:
		return syscall.EINVAL
	}
	return 0
}

func isDot(name []byte) bool    { return len(name) == 1 && name[0] == '.' }
func isDotDot(name []byte) bool { return len(name) == 2 && name[0] == '.' && name[1] == '.' }

// checkNewName checks a name an entry is made under: "." and ".." exist.
func checkNewName(name []byte) syscall.Errno {
	if e := checkName(name); e != 0 {
		return e
	}
	if isDot(name) || isDotDot(name) {
		return syscall.EEXIST
	}
	return 0
}

func getInode(tx *memTx, ino uint64) (*inode, error) {
	v := tx.Bucket(bucketInodes).Get(inoKey(ino))
	if v == nil {
		return nil, syscall.ENOENT
	}
	n := new(inode)
	if err := n.unmarshal(v); err != nil {
		return nil, err
	}
	return n, nil
}

func getDir(tx *memTx, ino uint64) (*inode, error) {
	n, err := getInode(tx, ino)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	return n, nil
}

func (s *Server) newIno(tx *memTx) (uint64, error) {
	v := tx.Bucket(bucketSuper).Get(keyNextIno)
	if len(v) != 8 {
		return 0, errCorruptInode
	}
	ino := binary.BigEndian.Uint64(v)
	if ino > maxIno {
		return 0, syscall.ENOSPC
	}
	return ino, s.put(tx, tagSuper, keyNextIno, inoKey(ino+1))
}

// entry looks name up in dir; found is false when there is none.
func entry(tx *memTx, dir uint64, name []byte) (ino, cookie uint64, mode uint32, found bool, err error) {
	v := tx.Bucket(bucketDirents).Get(nameKey(dir, name))
	if v == nil {
		return 0, 0, 0, false, nil
	}
	ino, cookie, mode, err = parseDirent(v)
	return ino, cookie, mode, err == nil, err
}

// addEntry links name in dir (whose record dn the caller puts back) to
// ino.
func (s *Server) addEntry(tx *memTx, dir uint64, dn *inode, name []byte, ino uint64, mode uint32) error {
	cookie := dn.NextCookie
	dn.NextCookie++
	if err := s.put(tx, tagDirents, nameKey(dir, name), direntValue(ino, cookie, mode)); err != nil {
		return err
	}
	return s.put(tx, tagCookies, cookieKey(dir, cookie), name)
}

func (s *Server) removeEntry(tx *memTx, dir uint64, name []byte, cookie uint64) error {
	if err := s.del(tx, tagDirents, nameKey(dir, name)); err != nil {
		return err
	}
	return s.del(tx, tagCookies, cookieKey(dir, cookie))
}

// dirEmpty reports whether dir has no entries.
func dirEmpty(tx *memTx, dir uint64) bool {
	prefix := inoKey(dir)
	k, _ := tx.Bucket(bucketDirents).Cursor().Seek(prefix)
	return k == nil || !bytes.HasPrefix(k, prefix)
}

// attrOf makes the Attr record of an inode. Blocks counts the chunks a
// file has, each a block, but no more than its size rounded up: a small
// file's one chunk holds only its bytes.
func (s *Server) attrOf(ino uint64, n *inode) proto.Attr {
	blocks := min(n.Chunks*uint64(s.bs), (n.Size+511)&^511) / 512
	if n.inline() || n.Mode&sIFMT == sIFLNK {
		blocks = (n.Size + 511) / 512
	}
	return proto.Attr{Ino: ino, Gen: 1, Size: n.Size, Blocks: blocks, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime,
		Mode: n.Mode, Nlink: n.Nlink, UID: n.UID, GID: n.GID, Rdev: n.Rdev}
}

// lookup finds name in parent.
func (s *Server) lookup(c *cred, parent uint64, name []byte) (a proto.Attr, err error) {
	if e := checkName(name); e != 0 {
		return a, e
	}
	err = s.db.View(func(tx *memTx) error {
		dn, err := getDir(tx, parent)
		if err != nil {
			return err
		}
		if err := c.check(dn, mayExec); err != nil {
			return err
		}
		ino := parent
		switch {
		case isDot(name):
		case isDotDot(name):
			ino = dn.Parent
		default:
			var found bool
			if ino, _, _, found, err = entry(tx, parent, name); err != nil {
				return err
			} else if !found {
				return syscall.ENOENT
			}
		}
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		a = s.attrOf(ino, n)
		return nil
	})
	return a, err
}

// getAttr returns ino's attributes, from the inode cache when it has
// them.
func (s *Server) getAttr(ino uint64) (proto.Attr, error) {
	e, err := s.loadInode(ino)
	if err != nil {
		return proto.Attr{}, err
	}
	return s.attrOf(ino, &e.n), nil
}

// mkInode makes a new inode named name in parent for c. The caller
// needs search and write permission on parent. The owner is c (n's UID
// and GID, which the host sent, count only for root); the group is
// parent's when parent is set-group-ID (and a new directory inherits
// the bit, while a group-executable file that gets a group c is not in
// loses its set-group-ID bit), as Linux's inode_init_owner does.
func (s *Server) mkInode(c *cred, parent uint64, name []byte, n *inode, data []byte) (a proto.Attr, err error) {
	if e := checkNewName(name); e != 0 {
		return a, e
	}
	now := s.opt.Now().UnixNano()
	n.Atime, n.Mtime, n.Ctime = now, now, now
	if !c.root() {
		n.UID, n.GID = c.uid, c.gid
	}
	gid, mode := n.GID, n.Mode
	err = s.update(func(tx *memTx) error {
		n.GID, n.Mode = gid, mode // a grouped commit may run this again
		dn, err := getDir(tx, parent)
		if err != nil {
			return err
		}
		if err := c.check(dn, mayExec); err != nil {
			return err
		}
		if dn.Nlink == 0 {
			return syscall.ENOENT // a directory being removed
		}
		if _, _, _, found, err := entry(tx, parent, name); err != nil {
			return err
		} else if found {
			return syscall.EEXIST
		}
		if err := c.check(dn, mayWrite); err != nil {
			return err
		}
		if dn.Mode&sISGID != 0 {
			n.GID = dn.GID
			switch {
			case n.isDir():
				n.Mode |= sISGID
			case n.Mode&(sISGID|0o010) == sISGID|0o010 && !c.root() && !c.inGroup(n.GID):
				n.Mode &^= sISGID
			}
		}
		ino, err := s.newIno(tx)
		if err != nil {
			return err
		}
		if n.isDir() {
			if dn.Nlink >= maxNlink {
				return syscall.EMLINK
			}
			n.Parent = parent
			n.NextCookie = proto.FirstCookie
			dn.Nlink++
		}
		if err := s.addEntry(tx, parent, dn, name, ino, n.Mode); err != nil {
			return err
		}
		dn.Mtime, dn.Ctime = now, now
		if err := s.putInode(tx, parent, dn); err != nil {
			return err
		}
		if data != nil {
			if err := s.putData(tx, ino, data); err != nil {
				return err
			}
		}
		if err := s.putInode(tx, ino, n); err != nil {
			return err
		}
		a = s.attrOf(ino, n)
		return nil
	})
	if err == nil {
		s.inodes.Add(1)
	}
	return a, err
}

func (s *Server) mkdir(c *cred, parent uint64, name []byte, mode, uid, gid uint32) (proto.Attr, error) {
	return s.mkInode(c, parent, name, &inode{Mode: sIFDIR | mode&0o7777, Nlink: 2, UID: uid, GID: gid}, nil)
}

// mknod makes a regular file, FIFO, socket, or (for root: CAP_MKNOD) a
// block or character device, whose rdev it keeps as the host sent it.
func (s *Server) mknod(c *cred, parent uint64, name []byte, mode, rdev, uid, gid uint32) (proto.Attr, error) {
	switch mode & sIFMT {
	case sIFREG, 0:
		return s.mkInode(c, parent, name, &inode{Mode: sIFREG | mode&0o7777, Nlink: 1, UID: uid, GID: gid, Flags: flagInline}, nil)
	case sIFIFO, sIFSOCK:
		return s.mkInode(c, parent, name, &inode{Mode: mode&sIFMT | mode&0o7777, Nlink: 1, UID: uid, GID: gid}, nil)
	case sIFBLK, sIFCHR:
		if !c.root() {
			return proto.Attr{}, syscall.EPERM
		}
		return s.mkInode(c, parent, name, &inode{Mode: mode&sIFMT | mode&0o7777, Nlink: 1, UID: uid, GID: gid, Rdev: rdev}, nil)
	}
	return proto.Attr{}, syscall.EINVAL
}

func (s *Server) symlink(c *cred, parent uint64, name, target []byte, uid, gid uint32) (proto.Attr, error) {
	switch {
	case len(target) == 0:
		return proto.Attr{}, syscall.ENOENT
	case len(target) > proto.MaxSymlink:
		return proto.Attr{}, syscall.ENAMETOOLONG
	}
	return s.mkInode(c, parent, name, &inode{Mode: sIFLNK | 0o777, Nlink: 1, UID: uid, GID: gid, Size: uint64(len(target))},
		append([]byte(nil), target...))
}

func (s *Server) readlink(ino uint64, buf []byte) (n int, err error) {
	err = s.db.View(func(tx *memTx) error {
		in, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if in.Mode&sIFMT != sIFLNK {
			return syscall.EINVAL
		}
		t := tx.Bucket(bucketData).Get(inoKey(ino))
		if len(t) > len(buf) {
			return syscall.ERANGE
		}
		n = copy(buf, t)
		return nil
	})
	return n, err
}

func (s *Server) link(c *cred, ino, newParent uint64, name []byte) (a proto.Attr, err error) {
	if e := checkNewName(name); e != 0 {
		return a, e
	}
	now := s.opt.Now().UnixNano()
	err = s.update(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if n.isDir() {
			return syscall.EPERM
		}
		if n.Nlink == 0 {
			return syscall.ENOENT
		}
		if n.Nlink >= maxNlink {
			return syscall.EMLINK
		}
		dn, err := getDir(tx, newParent)
		if err != nil {
			return err
		}
		if err := c.check(dn, mayExec); err != nil {
			return err
		}
		if _, _, _, found, err := entry(tx, newParent, name); err != nil {
			return err
		} else if found {
			return syscall.EEXIST
		}
		if err := c.check(dn, mayWrite); err != nil {
			return err
		}
		if err := s.addEntry(tx, newParent, dn, name, ino, n.Mode); err != nil {
			return err
		}
		dn.Mtime, dn.Ctime = now, now
		n.Nlink++
		n.Ctime = now
		if err := s.putInode(tx, newParent, dn); err != nil {
			return err
		}
		if err := s.putInode(tx, ino, n); err != nil {
			return err
		}
		a = s.attrOf(ino, n)
		return nil
	})
	return a, err
}

// gone is an inode whose last link went in a committed transaction: its
// chunks are deleted after the commit.
type gone struct {
	ino    uint64
	n      inode
	chunks bool
}

// dropLink takes one link from ino (record n, name removed by the caller
// already). A file that keeps no link is deleted, unless it is open: then
// it waits in bucketOrphans for its last release.
func (s *Server) dropLink(tx *memTx, ino uint64, n *inode, now int64, out *[]gone) error {
	if n.isDir() {
		n.Nlink = 0
	} else {
		n.Nlink--
	}
	n.Ctime = now
	if n.Nlink > 0 {
		return s.putInode(tx, ino, n)
	}
	if s.isOpen(ino) {
		if err := s.put(tx, tagOrphans, inoKey(ino), nil); err != nil {
			return err
		}
		return s.putInode(tx, ino, n)
	}
	if err := s.deleteInodeRecords(tx, ino); err != nil {
		return err
	}
	*out = append(*out, gone{ino: ino, n: *n, chunks: n.isReg() && !n.inline()})
	return nil
}

// finishGone accounts for inodes deleted by a committed transaction and
// deletes their chunks.
func (s *Server) finishGone(gs []gone) {
	for _, g := range gs {
		s.inodes.Add(-1)
		if g.n.isReg() && g.n.inline() {
			s.used.Add(-int64(g.n.Size))
		}
		if g.chunks {
			s.deleteChunks(g.ino, 0, int64(g.n.Size))
		}
	}
}

func (s *Server) unlink(c *cred, parent uint64, name []byte, dir bool) error {
	if e := checkName(name); e != 0 {
		return e
	}
	switch {
	case dir && isDot(name):
		return syscall.EINVAL
	case dir && isDotDot(name):
		return syscall.ENOTEMPTY
	case isDot(name) || isDotDot(name):
		return syscall.EISDIR
	}
	now := s.opt.Now().UnixNano()
	var gs []gone
	err := s.update(func(tx *memTx) error {
		gs = gs[:0] // a grouped commit may run this again
		dn, err := getDir(tx, parent)
		if err != nil {
			return err
		}
		if err := c.check(dn, mayExec); err != nil {
			return err
		}
		ino, cookie, _, found, err := entry(tx, parent, name)
		if err != nil {
			return err
		}
		if !found {
			return syscall.ENOENT
		}
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := c.mayDelete(dn, n); err != nil {
			return err
		}
		switch {
		case dir && !n.isDir():
			return syscall.ENOTDIR
		case !dir && n.isDir():
			return syscall.EISDIR
		case dir && !dirEmpty(tx, ino):
			return syscall.ENOTEMPTY
		}
		if err := s.removeEntry(tx, parent, name, cookie); err != nil {
			return err
		}
		if dir {
			dn.Nlink--
		}
		dn.Mtime, dn.Ctime = now, now
		if err := s.putInode(tx, parent, dn); err != nil {
			return err
		}
		return s.dropLink(tx, ino, n, now, &gs)
	})
	if err == nil {
		s.finishGone(gs)
	}
	return err
}

// isAncestor reports whether a is dir or one of its ancestors.
func isAncestor(tx *memTx, a, dir uint64) (bool, error) {
	for i := 0; ; i++ {
		if dir == a {
			return true, nil
		}
		if dir == 1 || i > 1<<20 {
			return false, nil
		}
		n, err := getInode(tx, dir)
		if err != nil {
			return false, err
		}
		dir = n.Parent
	}
}

func (s *Server) rename(c *cred, parent uint64, name []byte, newParent uint64, newName []byte, flags uint32) error {
	if flags&^(proto.RenameNoRepl|proto.RenameExch) != 0 || flags == proto.RenameNoRepl|proto.RenameExch {
		return syscall.EINVAL
	}
	for _, nm := range [][]byte{name, newName} {
		if e := checkName(nm); e != 0 {
			return e
		}
		if isDot(nm) || isDotDot(nm) {
			return syscall.EBUSY
		}
	}
	now := s.opt.Now().UnixNano()
	var gs []gone
	err := s.update(func(tx *memTx) error {
		gs = gs[:0] // a grouped commit may run this again
		src, err := getDir(tx, parent)
		if err != nil {
			return err
		}
		dst := src
		if newParent != parent {
			if dst, err = getDir(tx, newParent); err != nil {
				return err
			}
		}
		if err := c.check(src, mayExec); err != nil {
			return err
		}
		if err := c.check(dst, mayExec); err != nil {
			return err
		}
		ino, cookie, mode, found, err := entry(tx, parent, name)
		if err != nil {
			return err
		}
		if !found {
			return syscall.ENOENT
		}
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		oino, ocookie, omode, ofound, err := entry(tx, newParent, newName)
		if err != nil {
			return err
		}
		if err := s.checkRename(c, src, dst, n, ofound, oino, tx, newParent != parent, flags); err != nil {
			return err
		}
		if flags&proto.RenameExch != 0 && !ofound {
			return syscall.ENOENT
		}
		if ofound && flags&proto.RenameNoRepl != 0 {
			return syscall.EEXIST
		}
		if ofound && oino == ino {
			return nil // two names of one file: nothing happens
		}
		// A directory may not move below itself.
		if n.isDir() && newParent != parent {
			if below, err := isAncestor(tx, ino, newParent); err != nil {
				return err
			} else if below {
				return syscall.EINVAL
			}
		}
		var on *inode
		if ofound {
			if on, err = getInode(tx, oino); err != nil {
				return err
			}
			if on.isDir() && newParent != parent && flags&proto.RenameExch != 0 {
				if below, err := isAncestor(tx, oino, parent); err != nil {
					return err
				} else if below {
					return syscall.EINVAL
				}
			}
		}
		if flags&proto.RenameExch != 0 {
			// Swap the two entries' targets, keeping their cookies.
			if err := s.put(tx, tagDirents, nameKey(parent, name), direntValue(oino, cookie, omode)); err != nil {
				return err
			}
			if err := s.put(tx, tagDirents, nameKey(newParent, newName), direntValue(ino, ocookie, mode)); err != nil {
				return err
			}
			if newParent != parent {
				if n.isDir() != on.isDir() {
					d := int32(1)
					if on.isDir() {
						d = -1
					}
					src.Nlink = uint32(int32(src.Nlink) - d)
					dst.Nlink = uint32(int32(dst.Nlink) + d)
				}
				if n.isDir() {
					n.Parent = newParent
				}
				if on.isDir() {
					on.Parent = parent
				}
			}
			n.Ctime, on.Ctime = now, now
			if err := s.putInode(tx, ino, n); err != nil {
				return err
			}
			if err := s.putInode(tx, oino, on); err != nil {
				return err
			}
		} else {
			if ofound {
				switch {
				case n.isDir() && !on.isDir():
					return syscall.ENOTDIR
				case !n.isDir() && on.isDir():
					return syscall.EISDIR
				case on.isDir() && !dirEmpty(tx, oino):
					return syscall.ENOTEMPTY
				}
				if err := s.removeEntry(tx, newParent, newName, ocookie); err != nil {
					return err
				}
				if on.isDir() {
					dst.Nlink--
				}
			}
			if err := s.removeEntry(tx, parent, name, cookie); err != nil {
				return err
			}
			if err := s.addEntry(tx, newParent, dst, newName, ino, mode); err != nil {
				return err
			}
			if n.isDir() && newParent != parent {
				src.Nlink--
				dst.Nlink++
				n.Parent = newParent
			}
			n.Ctime = now
			if err := s.putInode(tx, ino, n); err != nil {
				return err
			}
			if ofound {
				if err := s.dropLink(tx, oino, on, now, &gs); err != nil {
					return err
				}
			}
		}
		src.Mtime, src.Ctime = now, now
		if err := s.putInode(tx, parent, src); err != nil {
			return err
		}
		if newParent != parent {
			dst.Mtime, dst.Ctime = now, now
			return s.putInode(tx, newParent, dst)
		}
		return nil
	})
	if err == nil {
		s.finishGone(gs)
	}
	return err
}

// checkRename decides whether c may move n out of src into dst,
// replacing (or, with RENAME_EXCHANGE, swapping with) the inode oino
// when ofound: write and search on both directories, the sticky rule on
// each entry that goes, and write permission on a directory that moves
// to another parent (its ".." changes).
func (s *Server) checkRename(c *cred, src, dst, n *inode, ofound bool, oino uint64, tx *memTx, moved bool, flags uint32) error {
	if err := c.mayDelete(src, n); err != nil {
		return err
	}
	if err := c.check(dst, mayWrite|mayExec); err != nil {
		return err
	}
	if moved && n.isDir() {
		if err := c.check(n, mayWrite); err != nil {
			return err
		}
	}
	if !ofound {
		return nil
	}
	on, err := getInode(tx, oino)
	if err != nil {
		return err
	}
	if err := c.mayDelete(dst, on); err != nil {
		return err
	}
	if moved && flags&proto.RenameExch != 0 && on.isDir() {
		return c.check(on, mayWrite)
	}
	return nil
}

// Handles.

func (s *Server) isOpen(ino uint64) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return s.open[ino] > 0
}

// allocHandle returns a handle number never handed out before.
func (s *Server) allocHandle() uint64 {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.nextHandle++
	return s.nextHandle
}

// holdsHandle reports whether handle h is open on ino.
func (s *Server) holdsHandle(h, ino uint64) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	hd, ok := s.handles[h]
	return ok && hd.ino == ino
}

// handle is an open handle: its inode and what it grants (the
// credential that opened it and the access it was opened with).
type handle struct {
	ino uint64
	g   grant
}

// registerHandle opens h on ino for c with access acc. A handle number
// already open stays as it is: EBADF unless it is the same open (a
// reclaim sent again).
func (s *Server) registerHandle(h, ino uint64, c *cred, acc uint32) error {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	g := grant{ino: ino, cred: c.id, acc: acc}
	if hd, ok := s.handles[h]; ok {
		if hd.g != g {
			return syscall.EBADF
		}
		return nil
	}
	s.handles[h] = handle{ino: ino, g: g}
	s.open[ino]++
	s.grants[g]++
	return nil
}

// release closes a handle; the last one of an unlinked file deletes it.
func (s *Server) release(ino, h uint64) error {
	s.hmu.Lock()
	hd, ok := s.handles[h]
	if !ok || hd.ino != ino {
		s.hmu.Unlock()
		return syscall.EBADF
	}
	delete(s.handles, h)
	if s.grants[hd.g]--; s.grants[hd.g] == 0 {
		delete(s.grants, hd.g)
	}
	s.open[ino]--
	last := s.open[ino] == 0
	if last {
		delete(s.open, ino)
	}
	s.hmu.Unlock()
	if !last {
		return nil
	}
	return s.dropOrphan(ino)
}

// dropOrphan deletes ino if it is unlinked (in bucketOrphans) and no
// handle holds it.
func (s *Server) dropOrphan(ino uint64) error {
	var gs []gone
	err := s.update(func(tx *memTx) error {
		gs = gs[:0] // a grouped commit may run this again
		if tx.Bucket(bucketOrphans).Get(inoKey(ino)) == nil || s.isOpen(ino) {
			return nil
		}
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := s.del(tx, tagOrphans, inoKey(ino)); err != nil {
			return err
		}
		if err := s.deleteInodeRecords(tx, ino); err != nil {
			return err
		}
		gs = append(gs, gone{ino: ino, n: *n, chunks: n.isReg() && !n.inline()})
		return nil
	})
	if err == nil {
		s.finishGone(gs)
	}
	return err
}

// Extended attributes.

func xattrKey(ino uint64, name []byte) []byte { return nameKey(ino, name) }

func checkXattrName(name []byte) syscall.Errno {
	switch {
	case len(name) == 0 || bytes.IndexByte(name, 0) >= 0:
		return syscall.EINVAL
	case len(name) > proto.MaxXattrName:
		return syscall.ERANGE
	}
	return 0
}

func (s *Server) getXattr(c *cred, ino uint64, name, buf []byte) (n int, err error) {
	if e := checkXattrName(name); e != 0 {
		return 0, e
	}
	err = s.db.View(func(tx *memTx) error {
		in, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := c.checkXattr(in, name, false); err != nil {
			return err
		}
		v := tx.Bucket(bucketXattrs).Get(xattrKey(ino, name))
		if v == nil {
			return syscall.ENODATA
		}
		if len(v) > len(buf) {
			return syscall.ERANGE
		}
		n = copy(buf, v)
		return nil
	})
	return n, err
}

func (s *Server) setXattr(c *cred, ino uint64, name, value []byte, flags uint32) error {
	if e := checkXattrName(name); e != 0 {
		return e
	}
	if flags&^(proto.XattrCreate|proto.XattrReplace) != 0 || flags == proto.XattrCreate|proto.XattrReplace {
		return syscall.EINVAL
	}
	if len(value) > proto.MaxXattrValue {
		return syscall.E2BIG
	}
	now := s.opt.Now().UnixNano()
	return s.update(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := c.checkXattr(n, name, true); err != nil {
			return err
		}
		b := tx.Bucket(bucketXattrs)
		k := xattrKey(ino, name)
		exists := b.Get(k) != nil
		switch {
		case flags&proto.XattrCreate != 0 && exists:
			return syscall.EEXIST
		case flags&proto.XattrReplace != 0 && !exists:
			return syscall.ENODATA
		}
		if err := s.put(tx, tagXattrs, k, append([]byte{}, value...)); err != nil {
			return err
		}
		n.Ctime = now
		return s.putInode(tx, ino, n)
	})
}

// listXattr lists the names of ino's extended attributes that c may
// see: not trusted.* unless c is root, and no POSIX ACL (a database from
// before ACLs were refused may hold some; they no longer apply).
func (s *Server) listXattr(c *cred, ino uint64, buf []byte) (n int, err error) {
	err = s.db.View(func(tx *memTx) error {
		if _, err := getInode(tx, ino); err != nil {
			return err
		}
		prefix := inoKey(ino)
		cur := tx.Bucket(bucketXattrs).Cursor()
		for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
			name := k[8:]
			if bytes.Equal(name, aclAccess) || bytes.Equal(name, aclDefault) ||
				!c.root() && bytes.HasPrefix(name, xattrTrusted) {
				continue
			}
			if n+len(name)+1 > len(buf) {
				return syscall.ERANGE
			}
			n += copy(buf[n:], name)
			buf[n] = 0
			n++
		}
		return nil
	})
	return n, err
}

func (s *Server) removeXattr(c *cred, ino uint64, name []byte) error {
	if e := checkXattrName(name); e != 0 {
		return e
	}
	now := s.opt.Now().UnixNano()
	return s.update(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := c.checkXattr(n, name, true); err != nil {
			return err
		}
		b := tx.Bucket(bucketXattrs)
		k := xattrKey(ino, name)
		if b.Get(k) == nil {
			return syscall.ENODATA
		}
		if err := s.del(tx, tagXattrs, k); err != nil {
			return err
		}
		n.Ctime = now
		return s.putInode(tx, ino, n)
	})
}

// readDir fills buf with the entries after cookie.
func (s *Server) readDir(c *cred, ino, cookie uint64, buf []byte, plus bool) (n int, err error) {
	err = s.db.View(func(tx *memTx) error {
		dn, err := getDir(tx, ino)
		if err != nil {
			return err
		}
		if err := s.checkData(c, ino, dn, mayRead); err != nil {
			return err
		}
		w := proto.NewDirentWriter(buf, plus)
		add := func(name []byte, child, ck uint64, mode uint32) (bool, error) {
			e := proto.Dirent{Ino: child, Cookie: ck, Mode: mode & sIFMT, Name: name}
			if plus {
				cn, err := getInode(tx, child)
				if err != nil {
					return false, err
				}
				e.Attr = s.attrOf(child, cn)
			}
			return w.Add(&e), nil
		}
		if cookie < proto.CookieDot {
			if ok, err := add([]byte("."), ino, proto.CookieDot, sIFDIR); err != nil || !ok {
				n = w.Finish(false)
				return err
			}
		}
		if cookie < proto.CookieDotDot {
			if ok, err := add([]byte(".."), dn.Parent, proto.CookieDotDot, sIFDIR); err != nil || !ok {
				n = w.Finish(false)
				return err
			}
		}
		prefix := inoKey(ino)
		c := tx.Bucket(bucketCookies).Cursor()
		for k, name := c.Seek(cookieKey(ino, max(cookie+1, proto.FirstCookie))); k != nil && bytes.HasPrefix(k, prefix); k, name = c.Next() {
			child, ck, mode, found, err := entry(tx, ino, name)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			ok, err := add(name, child, ck, mode)
			if err != nil {
				return err
			}
			if !ok {
				n = w.Finish(false)
				return nil
			}
		}
		n = w.Finish(true)
		return nil
	})
	return n, err
}
