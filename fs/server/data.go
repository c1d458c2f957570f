package server

import (
	"errors"
	"io"
	"sort"
	"sync"
	"syscall"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// File data. A regular file's data is either inline (flagInline: the
// bytes in bucketData, for files of at most InlineMax bytes) or in chunks
// of BlockSize bytes, block b of inode i in the chunk s.chunkID(i, b). A
// block never written has no chunk and reads as zeros (sparse files); a
// chunk may be shorter than a block (the rest reads as zeros), and bytes
// of a chunk past the end of the file are never shown: reads stop at the
// file size, and a file that grows first has the block that held its old
// end cut back to it (trimTail).

// dataLock returns the lock of ino's data (Server.dataLocks). Callers
// lock and unlock it themselves: returning the unlock as a func value
// would allocate a closure per read.
func (s *Server) dataLock(ino uint64) *sync.RWMutex {
	return &s.dataLocks[ino%uint64(len(s.dataLocks))]
}

// inodeOf returns a copy of ino's committed record, from the inode
// cache when it is there.
func (s *Server) inodeOf(ino uint64) (*inode, error) {
	e, err := s.loadInode(ino)
	if err != nil {
		return nil, err
	}
	n := e.n
	return &n, nil
}

// viewInode reads ino's record from the database, past the cache.
func (s *Server) viewInode(ino uint64) (*inode, error) {
	var n *inode
	err := s.db.View(func(tx *memTx) error {
		var err error
		n, err = getInode(tx, ino)
		return err
	})
	return n, err
}

// chunkExists reports whether block b of ino has a chunk.
func (s *Server) chunkExists(ino uint64, b int64) (int64, bool) {
	n, err := s.store.ChunkSize(s.chunkID(ino, b))
	return n, err == nil
}

// readBlock reads [lo, lo+len(p)) of block b into p, zeros where the chunk
// has no bytes.
func (s *Server) readBlock(ino uint64, b int64, p []byte, lo int64) error {
	n, err := s.store.ReadChunkAt(s.chunkID(ino, b), p, lo)
	switch {
	case errors.Is(err, chunkstore.ErrNotFound):
		n = 0
	case err != nil && err != io.EOF:
		return err
	}
	clear(p[n:])
	return nil
}

// read reads from a regular file at off into buf. The inode (and an
// inline file's data) comes from the inode cache: a read that finds it
// there opens no transaction and allocates nothing.
func (s *Server) read(c *cred, ino uint64, off int64, buf []byte) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	l := s.dataLock(ino)
	l.RLock()
	defer l.RUnlock()
	e, err := s.loadInode(ino)
	if err != nil {
		return 0, err
	}
	n := &e.n
	switch {
	case n.isDir():
		return 0, syscall.EISDIR
	case !n.isReg():
		return 0, syscall.EINVAL
	}
	if err := s.checkData(c, ino, n, mayRead); err != nil {
		return 0, err
	}
	return s.readLocked(ino, e, off, buf)
}

// readLocked is read's body, for a regular file whose data lock the
// caller holds (shared or not) and whose cached entry is e.
func (s *Server) readLocked(ino uint64, e *icacheEntry, off int64, buf []byte) (int, error) {
	n := &e.n
	if off >= int64(n.Size) {
		return 0, nil
	}
	want := int(min(int64(len(buf)), int64(n.Size)-off))
	if n.inline() {
		c := 0
		if off < int64(len(e.data)) {
			c = copy(buf[:want], e.data[off:])
		}
		clear(buf[c:want])
		return want, nil
	}
	for done := 0; done < want; {
		pos := off + int64(done)
		b, lo := pos/s.bs, pos%s.bs
		k := int(min(int64(want-done), s.bs-lo))
		if err := s.readBlock(ino, b, buf[done:done+k], lo); err != nil {
			return done, err
		}
		done += k
	}
	return want, nil
}

// putBlock stores block b of ino, counting a chunk that is new.
func (s *Server) putBlock(ino uint64, b int64, data []byte, added *int64) error {
	s.dirty.Store(true)
	_, existed := s.chunkExists(ino, b)
	if err := s.store.PutChunk(s.chunkID(ino, b), data, 0); err != nil {
		return err
	}
	if !existed {
		*added++
	}
	return nil
}

// writeBlock writes part at lo into block b of ino, counting a chunk
// that is new. Only the written bytes go to the store (the chunk's
// sectors that part covers, the partial ones merged there). A block wholly
// past the file's old end (beyond) holds nothing of the file, so a chunk
// found there is one a crash left before its size was synced: it goes
// first, or its stale bytes would show in front of part.
func (s *Server) writeBlock(ino uint64, b int64, part []byte, lo int64, beyond bool, added *int64) error {
	s.dirty.Store(true)
	id := s.chunkID(ino, b)
	_, existed := s.chunkExists(ino, b)
	if existed && beyond && lo > 0 {
		if err := s.store.DeleteChunk(id, 0); err != nil && !errors.Is(err, chunkstore.ErrNotFound) {
			return err
		}
	}
	created, err := s.store.WriteChunkAt(id, part, lo, 0)
	if created && !existed {
		*added++
	}
	return err
}

// trimTail cuts the block holding the end of a file of size bytes back to
// it, so that bytes a crash or a shrink left past the end never show when
// the file grows.
func (s *Server) trimTail(ino uint64, size int64) error {
	b, lo := size/s.bs, size%s.bs
	if lo == 0 {
		return nil
	}
	clen, ok := s.chunkExists(ino, b)
	if !ok || clen <= lo {
		return nil
	}
	buf := make([]byte, lo)
	if err := s.readBlock(ino, b, buf, 0); err != nil {
		return err
	}
	s.dirty.Store(true)
	return s.store.PutChunk(s.chunkID(ino, b), buf, 0)
}

// spill moves an inline file's data into block 0. The metadata change
// that follows (the inode no longer inline) is staged after the chunk's
// record is in the store, so no checkpoint takes it without the chunk:
// it never points at data a crash could lose, and costs no sync.
func (s *Server) spill(ino uint64, data []byte, added *int64) error {
	if len(data) > 0 {
		return s.putBlock(ino, 0, data, added)
	}
	return nil
}

// write writes data at off (or at the end with appending) and returns the
// bytes written. A write by anyone but root drops the set-user-ID and
// set-group-ID bits (killPriv).
func (s *Server) write(c *cred, ino uint64, off int64, data []byte, appending bool) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	l := s.dataLock(ino)
	l.Lock()
	defer l.Unlock()
	e, err := s.loadInode(ino)
	if err != nil {
		return 0, err
	}
	switch {
	case e.n.isDir():
		return 0, syscall.EISDIR
	case !e.n.isReg():
		return 0, syscall.EINVAL
	}
	if err := s.checkData(c, ino, &e.n, mayWrite); err != nil {
		return 0, err
	}
	return s.writeLocked(c, ino, e, off, data, appending)
}

// writeLocked is write's body, for a regular file whose data lock the
// caller holds and whose cached entry is e, as c.
func (s *Server) writeLocked(c *cred, ino uint64, e *icacheEntry, off int64, data []byte, appending bool) (int, error) {
	n, inline := &e.n, e.data // the cache's: not to be changed
	kill := !c.root() && n.Mode&(sISUID|sISGID) != 0
	if appending {
		off = int64(n.Size)
	}
	size := int64(n.Size)
	end := off + int64(len(data))
	if end < off || end > maxFileSize || end/s.bs > maxIno {
		return 0, syscall.EFBIG
	}
	if len(data) == 0 {
		return 0, nil
	}
	newSize := max(size, end)
	now := s.opt.Now().UnixNano()
	if n.inline() && newSize <= int64(s.opt.InlineMax) {
		buf := make([]byte, newSize)
		copy(buf, inline)
		copy(buf[off:], data)
		if s.used.Load()+newSize-size > s.opt.Capacity {
			return 0, syscall.ENOSPC
		}
		err := s.update(func(tx *memTx) error {
			n, err := getInode(tx, ino)
			if err != nil {
				return err
			}
			n.Size, n.Mtime, n.Ctime = uint64(newSize), now, now
			if kill {
				killPriv(n)
			}
			if err := s.dropCaps(tx, ino, n); err != nil {
				return err
			}
			if err := s.putData(tx, ino, buf); err != nil {
				return err
			}
			return s.putInode(tx, ino, n)
		})
		if err != nil {
			return 0, err
		}
		s.used.Add(newSize - size)
		return len(data), nil
	}
	firstB, lastB := off/s.bs, (end-1)/s.bs
	if s.used.Load()+(lastB-firstB+1)*s.bs > s.opt.Capacity {
		return 0, syscall.ENOSPC
	}
	var added int64
	wasInline := n.inline()
	if wasInline {
		if err := s.spill(ino, inline, &added); err != nil {
			return 0, err
		}
		// The spilled data is now block 0; make the metadata say so.
		if err := s.update(func(tx *memTx) error {
			m, err := getInode(tx, ino)
			if err != nil {
				return err
			}
			m.Flags &^= flagInline
			m.Chunks += uint64(added)
			if err := s.deleteData(tx, ino); err != nil {
				return err
			}
			return s.putInode(tx, ino, m)
		}); err != nil {
			return 0, err
		}
		s.used.Add(added*s.bs - size)
		added = 0
	} else if off > size {
		if err := s.trimTail(ino, size); err != nil {
			return 0, err
		}
	}
	for b := firstB; b <= lastB; b++ {
		bstart := b * s.bs
		lo := max(off, bstart) - bstart
		hi := min(end, bstart+s.bs) - bstart
		if err := s.writeBlock(ino, b, data[bstart+lo-off:bstart+hi-off], lo, bstart >= size, &added); err != nil {
			s.used.Add(added * s.bs)
			s.commitChunks(ino, added, size, now, kill)
			return 0, err
		}
	}
	s.used.Add(added * s.bs)
	if err := s.commitChunks(ino, added, newSize, now, kill); err != nil {
		return 0, err
	}
	return len(data), nil
}

// commitChunks records a data change: chunks added, the new size, the
// modification time, and with kill the loss of set-ID bits. An inode
// deleted meanwhile gets its chunks deleted.
func (s *Server) commitChunks(ino uint64, added, newSize, now int64, kill bool) error {
	err := s.update(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		n.Chunks = uint64(int64(n.Chunks) + added)
		n.Size = uint64(max(int64(n.Size), newSize))
		n.Mtime, n.Ctime = now, now
		if kill {
			killPriv(n)
		}
		if err := s.dropCaps(tx, ino, n); err != nil {
			return err
		}
		return s.putInode(tx, ino, n)
	})
	if errors.Is(err, syscall.ENOENT) {
		s.deleteChunksLocked(ino, 0, newSize)
	}
	return err
}

// deleteChunks deletes the chunks of ino's blocks from block first on, in
// a file of size bytes.
func (s *Server) deleteChunks(ino uint64, first, size int64) {
	l := s.dataLock(ino)
	l.Lock()
	defer l.Unlock()
	s.deleteChunksLocked(ino, first, size)
}

func (s *Server) deleteChunksLocked(ino uint64, first, size int64) int64 {
	// The change that dropped the chunks goes to the store first, so that
	// a checkpoint taking a deletion takes it too: after a crash no file
	// names a block whose chunk is gone. Should that fail, the chunks stay
	// for the next sweep.
	if err := s.stage(); err != nil {
		s.log.Warn("fs: staging the metadata failed; chunks stay until the next sweep", "ino", ino, "err", err)
		return 0
	}
	last := (size + s.bs - 1) / s.bs // exclusive
	var ids []chunkstore.ChunkID
	if last-first > 4096 {
		// A large sparse range: walk the store's chunks instead.
		for _, ci := range s.store.Chunks() {
			if i, b, ok := s.parseChunkID(ci.ID); ok && i == ino && b >= first {
				ids = append(ids, ci.ID)
			}
		}
	} else {
		for b := first; b < last; b++ {
			if _, ok := s.chunkExists(ino, b); ok {
				ids = append(ids, s.chunkID(ino, b))
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	var n int64
	for _, id := range ids {
		s.dirty.Store(true)
		if err := s.store.DeleteChunk(id, 0); err == nil {
			n++
		} else if !errors.Is(err, chunkstore.ErrNotFound) {
			s.log.Warn("fs: deleting a chunk failed; the next sweep retries", "ino", ino, "err", err)
		}
	}
	s.used.Add(-n * s.bs)
	return n
}

// truncate sets a regular file's size, the data lock held.
func (s *Server) truncateLocked(ino uint64, n *inode, newSize int64, now int64) error {
	size := int64(n.Size)
	if newSize > maxFileSize || newSize/s.bs > maxIno {
		return syscall.EFBIG
	}
	if newSize == size {
		return nil
	}
	if n.inline() {
		if newSize <= int64(s.opt.InlineMax) {
			if s.used.Load()+newSize-size > s.opt.Capacity {
				return syscall.ENOSPC
			}
			err := s.update(func(tx *memTx) error {
				m, err := getInode(tx, ino)
				if err != nil {
					return err
				}
				d := tx.Bucket(bucketData).Get(inoKey(ino))
				buf := make([]byte, newSize)
				copy(buf, d)
				m.Size, m.Mtime, m.Ctime = uint64(newSize), now, now
				if err := s.putData(tx, ino, buf); err != nil {
					return err
				}
				return s.putInode(tx, ino, m)
			})
			if err == nil {
				s.used.Add(newSize - size)
			}
			return err
		}
		var data []byte
		if err := s.db.View(func(tx *memTx) error {
			data = append(data, tx.Bucket(bucketData).Get(inoKey(ino))...)
			return nil
		}); err != nil {
			return err
		}
		var added int64
		if err := s.spill(ino, data, &added); err != nil {
			return err
		}
		err := s.update(func(tx *memTx) error {
			m, err := getInode(tx, ino)
			if err != nil {
				return err
			}
			m.Flags &^= flagInline
			m.Chunks += uint64(added)
			m.Size, m.Mtime, m.Ctime = uint64(newSize), now, now
			if err := s.deleteData(tx, ino); err != nil {
				return err
			}
			return s.putInode(tx, ino, m)
		})
		if err == nil {
			s.used.Add(added*s.bs - size)
		}
		return err
	}
	if newSize > size {
		if err := s.trimTail(ino, size); err != nil {
			return err
		}
	}
	err := s.update(func(tx *memTx) error {
		m, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		m.Size, m.Mtime, m.Ctime = uint64(newSize), now, now
		return s.putInode(tx, ino, m)
	})
	if err != nil || newSize > size {
		return err
	}
	// Shrunk: the blocks wholly past the end go, after the commit (a
	// crash in between leaves them to the sweep).
	dropped := s.deleteChunksLocked(ino, (newSize+s.bs-1)/s.bs, size)
	if dropped == 0 {
		return nil
	}
	return s.update(func(tx *memTx) error {
		m, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		m.Chunks = uint64(max(int64(m.Chunks)-dropped, 0))
		return s.putInode(tx, ino, m)
	})
}

// checkSetAttr decides whether c may make the changes of in to n
// (setattr_prepare and chown_ok): a truncate needs write access (the
// mode, or a handle c opened for writing); chmod the owner (or root),
// except that whoever may write the file may clear its set-ID bits
// (the kernel asks so before a write when the mount does not handle
// them itself); only root gives a file away, and the owner may change
// its group to one of its own groups; explicit times need the owner,
// times set to now the owner or write permission.
func (s *Server) checkSetAttr(c *cred, ino uint64, n *inode, in *proto.SetAttr) error {
	if in.Valid&proto.SetSize != 0 {
		if err := s.checkData(c, ino, n, mayWrite); err != nil {
			return err
		}
	}
	if c.root() {
		return nil
	}
	if in.Valid&proto.SetMode != 0 && !c.owns(n) {
		killed := n.Mode & 0o7777 &^ (sISUID | sISGID)
		if in.Mode != killed || !c.may(n, mayWrite) {
			return syscall.EPERM
		}
	}
	if in.Valid&proto.SetUID != 0 && (in.UID != n.UID || c.uid != n.UID) {
		return syscall.EPERM
	}
	if in.Valid&proto.SetGID != 0 && (c.uid != n.UID || in.GID != n.GID && !c.inGroup(in.GID)) {
		return syscall.EPERM
	}
	explicit := in.Valid&proto.SetAtime != 0 && in.Valid&proto.SetAtimeNow == 0 ||
		in.Valid&proto.SetMtime != 0 && in.Valid&proto.SetMtimeNow == 0
	switch {
	case explicit && !c.owns(n):
		return syscall.EPERM
	case in.Valid&(proto.SetAtimeNow|proto.SetMtimeNow) != 0 && !c.owns(n) && !c.may(n, mayWrite):
		return syscall.EACCES
	}
	return nil
}

// setAttr applies a SetAttr record for c. Every change sets ctime; a
// size change (even to the same size) sets mtime unless in sets it, and
// a truncate by anyone but root and any chown drop the set-ID bits of a
// regular file (unless in sets the mode too, which wins); a truncate or
// chown by anyone drops its capabilities (dropCaps).
func (s *Server) setAttr(c *cred, ino uint64, in *proto.SetAttr) (a proto.Attr, err error) {
	now := s.opt.Now().UnixNano()
	if in.Valid&proto.SetSize != 0 {
		l := s.dataLock(ino)
		l.Lock()
		n, err := s.inodeOf(ino)
		if err == nil {
			switch {
			case n.isDir():
				err = syscall.EISDIR
			case !n.isReg():
				err = syscall.EINVAL
			case in.Size > maxFileSize:
				err = syscall.EFBIG
			default:
				if err = s.checkSetAttr(c, ino, n, in); err == nil {
					err = s.truncateLocked(ino, n, int64(in.Size), now)
				}
			}
		}
		l.Unlock()
		if err != nil {
			return a, err
		}
	}
	err = s.update(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if in.Valid&^proto.SetSize != 0 {
			// The size is set already: check the rest against the
			// inode as it is in this transaction.
			rest := *in
			rest.Valid &^= proto.SetSize
			if err := s.checkSetAttr(c, ino, n, &rest); err != nil {
				return err
			}
		}
		if in.Valid&proto.SetUID != 0 {
			n.UID = in.UID
		}
		if in.Valid&proto.SetGID != 0 {
			n.GID = in.GID
		}
		if in.Valid&(proto.SetUID|proto.SetGID) != 0 || in.Valid&proto.SetSize != 0 && !c.root() {
			killPriv(n)
		}
		if in.Valid&(proto.SetUID|proto.SetGID|proto.SetSize) != 0 {
			if err := s.dropCaps(tx, ino, n); err != nil {
				return err
			}
		}
		if in.Valid&proto.SetMode != 0 {
			mode := in.Mode & 0o7777
			if !c.root() && !c.inGroup(n.GID) {
				mode &^= sISGID
			}
			n.Mode = n.Mode&sIFMT | mode
		}
		switch {
		case in.Valid&proto.SetAtimeNow != 0:
			n.Atime = now
		case in.Valid&proto.SetAtime != 0:
			n.Atime = in.Atime
		}
		switch {
		case in.Valid&proto.SetMtimeNow != 0:
			n.Mtime = now
		case in.Valid&proto.SetMtime != 0:
			n.Mtime = in.Mtime
		case in.Valid&proto.SetSize != 0:
			n.Mtime = now
		}
		if in.Valid != 0 {
			n.Ctime = now
		}
		if err := s.putInode(tx, ino, n); err != nil {
			return err
		}
		a = s.attrOf(ino, n)
		return nil
	})
	return a, err
}

// Open flags (Linux values, the same on every architecture Go supports
// for these bits).
const (
	oAccMode = 0x3
	oCreat   = 0x40
	oExcl    = 0x80
	oTrunc   = 0x200
	oAppend  = 0x400
	oWronly  = 0x1
	oRdwr    = 0x2
	// fmodeExec is __FMODE_EXEC, which the kernel sets in the flags of
	// the open of a file it executes.
	fmodeExec = 0x20
)

// open opens an inode for c; O_TRUNC with write access truncates a
// regular file. With check, c needs the access the flags ask for (read
// for O_RDONLY, exec instead for the kernel's open of a program, write
// also for O_TRUNC); an open of the file a create just made has none.
//
// reclaim, when not zero, is a handle of an earlier run of the server
// that the client had open: the open registers that number instead of a
// new one, so that the client's handle goes on working after a restart
// (doc.go, "Handles"). It truncates nothing and checks no permission:
// the handle passed the checks when it was opened, and the client is
// trusted to say so as it is trusted to name its caller.
func (s *Server) openIno(c *cred, ino uint64, flags uint32, check bool, reclaim uint64) (uint64, proto.Attr, error) {
	if reclaim != 0 {
		if reclaim>>32 == s.epoch && !s.holdsHandle(reclaim, ino) {
			return 0, proto.Attr{}, syscall.EBADF // this run's, and not open
		}
		flags &^= oTrunc
		check = false
	}
	n, err := s.inodeOf(ino)
	if err != nil {
		return 0, proto.Attr{}, err
	}
	writing := flags&oAccMode == oWronly || flags&oAccMode == oRdwr
	if n.isDir() && (writing || flags&oTrunc != 0) {
		return 0, proto.Attr{}, syscall.EISDIR
	}
	acc := openAccess(flags)
	if check {
		need := acc
		if flags&fmodeExec != 0 {
			need = need&^mayRead | mayExec
		}
		if flags&oTrunc != 0 {
			need |= mayWrite
		}
		if err := c.check(n, need); err != nil {
			return 0, proto.Attr{}, err
		}
	}
	if n.isReg() && flags&oTrunc != 0 && writing {
		if _, err := s.setAttr(c, ino, &proto.SetAttr{Valid: proto.SetSize}); err != nil {
			return 0, proto.Attr{}, err
		}
	}
	// The check and the handle's registration happen between writing
	// transactions (under txMu, which is held around each),
	// so that an unlink committed later sees the file open, and one
	// committed earlier made it ENOENT here. Opening writes nothing, so
	// it costs no commit.
	h := reclaim
	if h == 0 {
		h = s.allocHandle()
	}
	var a proto.Attr
	s.txMu.Lock()
	err = s.db.View(func(tx *memTx) error {
		n, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if n.Nlink == 0 && tx.Bucket(bucketOrphans).Get(inoKey(ino)) == nil {
			return syscall.ENOENT
		}
		if err := s.registerHandle(h, ino, c, acc); err != nil {
			return err
		}
		a = s.attrOf(ino, n)
		return nil
	})
	s.txMu.Unlock()
	return h, a, err
}

// create makes and opens a regular file, or opens an existing one (which
// takes the permissions an open does; the file it makes, none).
func (s *Server) create(c *cred, parent uint64, name []byte, mode, uid, gid, flags uint32) (proto.Attr, uint64, error) {
	a, err := s.mknod(c, parent, name, sIFREG|mode&0o7777, 0, uid, gid)
	check := false
	if errors.Is(err, syscall.EEXIST) && flags&oExcl == 0 && checkNewName(name) == 0 {
		check = true
		if a, err = s.lookup(c, parent, name); err != nil {
			return a, 0, err
		}
		if a.Mode&sIFMT == sIFDIR {
			return a, 0, syscall.EISDIR
		}
	} else if err != nil {
		return a, 0, err
	} else {
		flags &^= oTrunc
	}
	if flags&oAccMode == 0 {
		flags |= oWronly
	}
	h, a, err := s.openIno(c, a.Ino, flags, check, 0)
	return a, h, err
}

// fallocate allocates (mode 0 or KEEP_SIZE: the file grows to off+length
// unless KEEP_SIZE; space is checked, not reserved) or punches a hole
// (PUNCH_HOLE|KEEP_SIZE).
func (s *Server) fallocate(c *cred, ino uint64, mode uint32, off, length int64) error {
	if off < 0 || length <= 0 || off+length < off {
		return syscall.EINVAL
	}
	l := s.dataLock(ino)
	l.Lock()
	defer l.Unlock()
	n, err := s.inodeOf(ino)
	if err != nil {
		return err
	}
	switch {
	case n.isDir():
		return syscall.EISDIR
	case !n.isReg():
		return syscall.ENODEV
	}
	if err := s.checkData(c, ino, n, mayWrite); err != nil {
		return err
	}
	now := s.opt.Now().UnixNano()
	end := off + length
	size := int64(n.Size)
	switch mode {
	case 0, proto.FallocKeep:
		if end > maxFileSize {
			return syscall.EFBIG
		}
		if grow := end - size; grow > 0 && s.used.Load()+grow > s.opt.Capacity {
			return syscall.ENOSPC
		}
		if mode == 0 && end > size {
			return s.truncateLocked(ino, n, end, now)
		}
		return nil
	case proto.FallocPunch | proto.FallocKeep:
		return s.punchLocked(ino, n, off, end, now)
	case proto.FallocZero, proto.FallocZero | proto.FallocKeep:
		// Zeros read back from [off, end): a hole where the file has
		// data, and the size grows to end unless asked not to.
		if end > maxFileSize {
			return syscall.EFBIG
		}
		if err := s.punchLocked(ino, n, off, end, now); err != nil {
			return err
		}
		if mode&proto.FallocKeep != 0 || end <= size {
			return nil
		}
		if n, err = s.inodeOf(ino); err != nil {
			return err
		}
		return s.truncateLocked(ino, n, end, now)
	case proto.FallocCollapse:
		// The range goes and what follows it moves down over it; as on
		// Linux the range is whole blocks and ends inside the file.
		if off%rangeBlock != 0 || length%rangeBlock != 0 || end >= size {
			return syscall.EINVAL
		}
		if err := s.moveLocked(c, ino, end, off, size-end); err != nil {
			return err
		}
		if n, err = s.inodeOf(ino); err != nil {
			return err
		}
		return s.truncateLocked(ino, n, size-length, now)
	case proto.FallocInsert:
		// A hole of length bytes opens at off, which must be inside the
		// file, and what follows moves up.
		if off%rangeBlock != 0 || length%rangeBlock != 0 || off >= size {
			return syscall.EINVAL
		}
		if size+length > maxFileSize || size+length < size {
			return syscall.EFBIG
		}
		if err := s.moveLocked(c, ino, off, off+length, size-off); err != nil {
			return err
		}
		if n, err = s.inodeOf(ino); err != nil {
			return err
		}
		return s.punchLocked(ino, n, off, end, now)
	default:
		return syscall.EOPNOTSUPP
	}
}

// rangeBlock is the unit of FALLOCATE's collapse and insert ranges: the
// block size stat reports.
const rangeBlock = 4096

// moveChunk is how much moveLocked copies at a time.
const moveChunk = 1 << 20

// moveLocked copies n bytes of the file from src to dst, as c, holding
// its data lock: in ascending order when moving down, descending when
// moving up, so that overlapping ranges come out right. The bytes never
// leave the server.
func (s *Server) moveLocked(c *cred, ino uint64, src, dst, n int64) error {
	buf := make([]byte, min(n, moveChunk))
	for done := int64(0); done < n; {
		k := min(n-done, int64(len(buf)))
		at := done
		if dst > src {
			at = n - done - k
		}
		e, err := s.loadInode(ino)
		if err != nil {
			return err
		}
		m, err := s.readLocked(ino, e, src+at, buf[:k])
		if err != nil {
			return err
		}
		clear(buf[m:k]) // past the end reads as zeros
		if e, err = s.loadInode(ino); err != nil {
			return err
		}
		if _, err := s.writeLocked(c, ino, e, dst+at, buf[:k], false); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// punchLocked makes [off, end) of the file read as zeros, within its
// size, freeing the chunks it covers whole, holding its data lock.
func (s *Server) punchLocked(ino uint64, n *inode, off, end, now int64) error {
	size := int64(n.Size)
	end = min(end, size)
	if off >= end {
		return nil
	}
	if n.inline() {
		return s.update(func(tx *memTx) error {
			m, err := getInode(tx, ino)
			if err != nil {
				return err
			}
			d := append([]byte(nil), tx.Bucket(bucketData).Get(inoKey(ino))...)
			if off < int64(len(d)) { // past the stored bytes the file reads as zeros already
				clear(d[off:min(end, int64(len(d)))])
			}
			m.Mtime, m.Ctime = now, now
			if err := s.putData(tx, ino, d); err != nil {
				return err
			}
			return s.putInode(tx, ino, m)
		})
	}
	var dropped int64
	for b := off / s.bs; b*s.bs < end; b++ {
		bstart := b * s.bs
		lo, hi := max(off, bstart)-bstart, min(end, bstart+s.bs)-bstart
		clen, ok := s.chunkExists(ino, b)
		if !ok {
			continue
		}
		if lo == 0 && (hi == s.bs || bstart+hi >= size) {
			s.dirty.Store(true)
			if err := s.store.DeleteChunk(s.chunkID(ino, b), 0); err == nil {
				dropped++
			}
			continue
		}
		if lo >= clen {
			continue
		}
		s.dirty.Store(true)
		if _, err := s.store.WriteChunkAt(s.chunkID(ino, b), make([]byte, min(hi, clen)-lo), lo, 0); err != nil {
			return err
		}
	}
	s.used.Add(-dropped * s.bs)
	return s.update(func(tx *memTx) error {
		m, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		m.Chunks = uint64(max(int64(m.Chunks)-dropped, 0))
		m.Mtime, m.Ctime = now, now
		return s.putInode(tx, ino, m)
	})
}

// copyRange copies up to length bytes of the file src from srcOff to
// the file dst at dstOff, as c (read access to src, write access to dst,
// each by mode or by an open handle as for READ and WRITE), a MiB at a
// time through the server's memory: the bytes never cross the network.
// It stops at src's end and returns the bytes copied. Overlapping ranges
// of one file are EINVAL, as for copy_file_range(2).
func (s *Server) copyRange(c *cred, src uint64, srcOff int64, dst uint64, dstOff int64, length int64) (int, error) {
	if srcOff < 0 || dstOff < 0 || length < 0 || srcOff+length < srcOff || dstOff+length < dstOff {
		return 0, syscall.EINVAL
	}
	if src == dst && srcOff < dstOff+length && dstOff < srcOff+length {
		return 0, syscall.EINVAL
	}
	if n, err := s.inodeOf(dst); err != nil {
		return 0, err
	} else if n.isDir() {
		return 0, syscall.EISDIR
	} else if !n.isReg() {
		return 0, syscall.EINVAL
	}
	buf := make([]byte, min(length, moveChunk))
	done := int64(0)
	for done < length {
		k := min(length-done, int64(len(buf)))
		m, err := s.read(c, src, srcOff+done, buf[:k])
		if err != nil {
			return int(done), err
		}
		if m == 0 {
			break
		}
		if _, err := s.write(c, dst, dstOff+done, buf[:m], false); err != nil {
			return int(done), err
		}
		done += int64(m)
		if int64(m) < k {
			break
		}
	}
	return int(done), nil
}
