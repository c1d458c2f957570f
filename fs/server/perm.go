package server

import (
	"bytes"
	"slices"
	"sync"
	"syscall"

	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// Permissions. Every operation runs for a caller (a cred: the
// credential its command names in MPTR, protocol.go "Credentials"), and
// the checks are Linux's generic_permission, may_delete and
// setattr_prepare, without ACLs (doc.go, "Permissions").

// cred is a caller: uid, primary gid and supplementary groups (sorted).
type cred struct {
	id     uint64
	uid    uint32
	gid    uint32
	groups []uint32
}

// rootCred is credential ID 0: uid 0, gid 0, no supplementary groups.
var rootCred = &cred{id: proto.RootCredID}

func newCred(c *proto.Cred) *cred {
	g := slices.Clone(c.Groups)
	slices.Sort(g)
	return &cred{id: c.ID(), uid: c.UID, gid: c.GID, groups: g}
}

func (c *cred) root() bool { return c.uid == 0 }

// inGroup reports whether gid is the caller's primary or a supplementary
// group.
func (c *cred) inGroup(gid uint32) bool {
	if c.gid == gid {
		return true
	}
	_, found := slices.BinarySearch(c.groups, gid)
	return found
}

// Access bits, as the rwx triplets of a mode.
const (
	mayExec  = proto.AccessExec
	mayWrite = proto.AccessWrite
	mayRead  = proto.AccessRead
)

// may reports whether c may access n as mask (mayRead|mayWrite|mayExec)
// by its mode: the owner's bits for the owner, the group's for a member
// of the file's group, the others' for the rest. Root passes read and
// write always, search of a directory always, and exec of a file when
// any x bit is set (CAP_DAC_OVERRIDE).
func (c *cred) may(n *inode, mask uint32) bool {
	if c.root() {
		return mask&mayExec == 0 || n.isDir() || n.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.uid == n.UID:
		bits = n.Mode >> 6
	case c.inGroup(n.GID):
		bits = n.Mode >> 3
	default:
		bits = n.Mode
	}
	return bits&7&mask == mask
}

// check is may as an errno: EACCES when refused.
func (c *cred) check(n *inode, mask uint32) error {
	if !c.may(n, mask) {
		return syscall.EACCES
	}
	return nil
}

// owns reports whether c is n's owner or root (inode_owner_or_capable).
func (c *cred) owns(n *inode) bool { return c.root() || c.uid == n.UID }

// mayDelete checks that c may remove (unlink, rmdir, rename away or
// over) victim from dir: write and search on dir, and in a sticky
// directory ownership of dir or of victim.
func (c *cred) mayDelete(dir, victim *inode) error {
	if err := c.check(dir, mayWrite|mayExec); err != nil {
		return err
	}
	if dir.Mode&syscall.S_ISVTX != 0 && !c.root() && c.uid != dir.UID && c.uid != victim.UID {
		return syscall.EPERM
	}
	return nil
}

// Set-user-ID and set-group-ID bits.
const (
	sISUID = syscall.S_ISUID
	sISGID = syscall.S_ISGID
)

// killPriv drops a regular file's set-user-ID bit, and its set-group-ID
// bit when group execute is set (without it, the bit marks mandatory
// locking and stays), as a write by someone other than root, a truncate
// by one, and any chown do. It reports whether it changed the mode.
func killPriv(n *inode) bool {
	if !n.isReg() {
		return false
	}
	m := n.Mode &^ sISUID
	if m&(sISGID|0o010) == sISGID|0o010 {
		m &^= sISGID
	}
	changed := m != n.Mode
	n.Mode = m
	return changed
}

// xattrCaps holds a file's capabilities (setcap(8)).
var xattrCaps = []byte("security.capability")

// dropCaps deletes a regular file's capabilities, as Linux does on a
// write, a truncate and a chown by anyone: the mount leaves this, and the
// set-ID bits, to the server (HANDLE_KILLPRIV_V2), which spares the
// kernel's GETXATTR of security.capability before every write.
func (s *Server) dropCaps(tx *memTx, ino uint64, n *inode) error {
	if !n.isReg() {
		return nil
	}
	k := xattrKey(ino, xattrCaps)
	if tx.Bucket(bucketXattrs).Get(k) == nil {
		return nil
	}
	return s.del(tx, tagXattrs, k)
}

// xattr namespaces and what they ask of a caller.
var (
	xattrUser    = []byte("user.")
	xattrTrusted = []byte("trusted.")
	aclAccess    = []byte("system.posix_acl_access")
	aclDefault   = []byte("system.posix_acl_default")
)

// checkXattr decides whether c may read (write false) or change an
// extended attribute of n: POSIX ACLs are not supported (doc.go says
// why), trusted.* is root's (hidden from others: ENODATA on read),
// user.* takes read or write permission and exists only on regular
// files and directories; other namespaces (security.*) are not checked.
func (c *cred) checkXattr(n *inode, name []byte, write bool) error {
	switch {
	case bytes.Equal(name, aclAccess), bytes.Equal(name, aclDefault):
		return syscall.EOPNOTSUPP
	case bytes.HasPrefix(name, xattrTrusted):
		if c.root() {
			return nil
		}
		if write {
			return syscall.EPERM
		}
		return syscall.ENODATA
	case bytes.HasPrefix(name, xattrUser):
		if !n.isReg() && !n.isDir() {
			if write {
				return syscall.EPERM
			}
			return syscall.ENODATA
		}
		if write {
			if n.isDir() && n.Mode&syscall.S_ISVTX != 0 && !c.owns(n) {
				return syscall.EPERM
			}
			return c.check(n, mayWrite)
		}
		return c.check(n, mayRead)
	}
	return nil
}

// credTableSize bounds the credentials a server keeps; past it, it
// forgets one at random, whose host registers it again on ENOKEY.
const credTableSize = 4096

// credTable holds the registered credentials by ID.
type credTable struct {
	// mu guards m; a leaf lock.
	mu sync.RWMutex
	m  map[uint64]*cred
}

// get returns the credential of id; RootCredID is always there.
func (t *credTable) get(id uint64) (*cred, bool) {
	if id == proto.RootCredID {
		return rootCred, true
	}
	t.mu.RLock()
	c, ok := t.m[id]
	t.mu.RUnlock()
	return c, ok
}

// register adds c.
func (t *credTable) register(c *cred) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*cred{}
	}
	if _, ok := t.m[c.id]; ok {
		return
	}
	if len(t.m) >= credTableSize {
		for id := range t.m {
			delete(t.m, id)
			break
		}
	}
	t.m[c.id] = c
}

// registerCred runs CRED: id must be the record's own hash.
func (s *Server) registerCred(id uint64, rec []byte) error {
	var pc proto.Cred
	if err := pc.Unmarshal(rec); err != nil {
		return syscall.EINVAL
	}
	if pc.ID() != id || id == proto.RootCredID {
		return syscall.EINVAL
	}
	s.creds.register(newCred(&pc))
	return nil
}

// grant is what one credential's open handles allow on one inode.
type grant struct {
	ino  uint64
	cred uint64
	acc  uint32 // mayRead|mayWrite
}

// openAccess is the access an open with Linux flags asks for.
func openAccess(flags uint32) uint32 {
	switch flags & oAccMode {
	case oWronly:
		return mayWrite
	case oRdwr:
		return mayRead | mayWrite
	}
	return mayRead
}

// holds reports whether c has a handle open on ino with access acc,
// hmu not held.
func (s *Server) holds(c *cred, ino uint64, acc uint32) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return s.grants[grant{ino, c.id, acc}] > 0 || s.grants[grant{ino, c.id, mayRead | mayWrite}] > 0
}

// checkData decides a data access (read, write, truncate, fallocate,
// readdir): by n's mode, or by a handle c holds on ino with that access.
func (s *Server) checkData(c *cred, ino uint64, n *inode, acc uint32) error {
	if c.may(n, acc) || s.holds(c, ino, acc) {
		return nil
	}
	return syscall.EACCES
}

// access runs ACCESS.
func (s *Server) access(c *cred, ino uint64, mask uint32) error {
	if mask&^(mayRead|mayWrite|mayExec) != 0 {
		return syscall.EINVAL
	}
	n, err := s.inodeOf(ino)
	if err != nil {
		return err
	}
	return c.check(n, mask)
}
