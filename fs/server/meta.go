package server

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"syscall"
)

// Buckets of the working database, and of the first format's bbolt file.
var (
	bucketSuper     = []byte("super")      // "next_ino" → u64, "version" → u32, "fsid" → u16
	bucketInodes    = []byte("inodes")     // ino (8, BE) → inode record
	bucketDirents   = []byte("dirents")    // parent (8, BE) + name → dirent value
	bucketCookies   = []byte("dircookies") // parent (8, BE) + cookie (8, BE) → name
	bucketData      = []byte("data")       // ino → inline file data, or a symlink's target
	bucketXattrs    = []byte("xattrs")     // ino + name → value
	bucketOrphans   = []byte("orphans")    // ino → empty: unlinked while open
	allBuckets      = [][]byte{bucketSuper, bucketInodes, bucketDirents, bucketCookies, bucketData, bucketXattrs, bucketOrphans}
	keyNextIno      = []byte("next_ino")
	keyVersion      = []byte("version")
	keyFSID         = []byte("fsid")
	formatVersion   = uint32(1)
	castagnoli      = crc32.MakeTable(crc32.Castagnoli)
	errCorruptInode = fmt.Errorf("fs/server: corrupt inode record: %w", syscall.EIO)
)

// File types (S_IFMT bits).
const (
	sIFMT   = syscall.S_IFMT
	sIFREG  = syscall.S_IFREG
	sIFDIR  = syscall.S_IFDIR
	sIFLNK  = syscall.S_IFLNK
	sIFIFO  = syscall.S_IFIFO
	sIFSOCK = syscall.S_IFSOCK
	sIFBLK  = syscall.S_IFBLK
	sIFCHR  = syscall.S_IFCHR
)

// inode is an inode record. Directories keep their parent (for "..") and
// the next cookie they hand out; regular files the number of data chunks
// they have and whether their data is inline.
type inode struct {
	Mode, Nlink, UID, GID, Rdev uint32
	Flags                       uint32
	Size                        uint64
	Atime, Mtime, Ctime         int64
	NextCookie                  uint64 // directories
	Chunks                      uint64 // regular files: data chunks that exist
	Parent                      uint64 // directories
}

// Inode flags.
const (
	flagInline = 1 // the file's data is in bucketData (regular files)
)

// Inode record offsets; the record ends with a CRC32C of what precedes it.
const (
	inodeOffMode   = 0
	inodeOffNlink  = 4
	inodeOffUID    = 8
	inodeOffGID    = 12
	inodeOffRdev   = 16
	inodeOffFlags  = 20
	inodeOffSize   = 24
	inodeOffAtime  = 32
	inodeOffMtime  = 40
	inodeOffCtime  = 48
	inodeOffCookie = 56
	inodeOffChunks = 64
	inodeOffParent = 72
	inodeOffCRC    = 80
	inodeSize      = 84
)

func (n *inode) isDir() bool { return n.Mode&sIFMT == sIFDIR }
func (n *inode) isReg() bool { return n.Mode&sIFMT == sIFREG }
func (n *inode) inline() bool {
	return n.Flags&flagInline != 0
}

func (n *inode) marshal() []byte {
	b := make([]byte, inodeSize)
	le := binary.LittleEndian
	le.PutUint32(b[inodeOffMode:], n.Mode)
	le.PutUint32(b[inodeOffNlink:], n.Nlink)
	le.PutUint32(b[inodeOffUID:], n.UID)
	le.PutUint32(b[inodeOffGID:], n.GID)
	le.PutUint32(b[inodeOffRdev:], n.Rdev)
	le.PutUint32(b[inodeOffFlags:], n.Flags)
	le.PutUint64(b[inodeOffSize:], n.Size)
	le.PutUint64(b[inodeOffAtime:], uint64(n.Atime))
	le.PutUint64(b[inodeOffMtime:], uint64(n.Mtime))
	le.PutUint64(b[inodeOffCtime:], uint64(n.Ctime))
	le.PutUint64(b[inodeOffCookie:], n.NextCookie)
	le.PutUint64(b[inodeOffChunks:], n.Chunks)
	le.PutUint64(b[inodeOffParent:], n.Parent)
	le.PutUint32(b[inodeOffCRC:], crc32.Checksum(b[:inodeOffCRC], castagnoli))
	return b
}

func (n *inode) unmarshal(b []byte) error {
	if len(b) != inodeSize {
		return errCorruptInode
	}
	le := binary.LittleEndian
	if le.Uint32(b[inodeOffCRC:]) != crc32.Checksum(b[:inodeOffCRC], castagnoli) {
		return errCorruptInode
	}
	*n = inode{
		Mode: le.Uint32(b[inodeOffMode:]), Nlink: le.Uint32(b[inodeOffNlink:]),
		UID: le.Uint32(b[inodeOffUID:]), GID: le.Uint32(b[inodeOffGID:]),
		Rdev: le.Uint32(b[inodeOffRdev:]), Flags: le.Uint32(b[inodeOffFlags:]),
		Size:  le.Uint64(b[inodeOffSize:]),
		Atime: int64(le.Uint64(b[inodeOffAtime:])), Mtime: int64(le.Uint64(b[inodeOffMtime:])),
		Ctime:      int64(le.Uint64(b[inodeOffCtime:])),
		NextCookie: le.Uint64(b[inodeOffCookie:]), Chunks: le.Uint64(b[inodeOffChunks:]),
		Parent: le.Uint64(b[inodeOffParent:]),
	}
	return nil
}

// Dirent values: the child's inode, the entry's cookie and the child's
// file type.
const direntValueSize = 20

func direntValue(ino, cookie uint64, mode uint32) []byte {
	b := make([]byte, direntValueSize)
	binary.LittleEndian.PutUint64(b[0:], ino)
	binary.LittleEndian.PutUint64(b[8:], cookie)
	binary.LittleEndian.PutUint32(b[16:], mode&sIFMT)
	return b
}

func parseDirent(b []byte) (ino, cookie uint64, mode uint32, err error) {
	if len(b) != direntValueSize {
		return 0, 0, 0, fmt.Errorf("fs/server: corrupt directory entry: %w", syscall.EIO)
	}
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint32(b[16:]), nil
}

func inoKey(ino uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ino)
	return b[:]
}

func nameKey(parent uint64, name []byte) []byte {
	b := make([]byte, 8+len(name))
	binary.BigEndian.PutUint64(b, parent)
	copy(b[8:], name)
	return b
}

func cookieKey(parent, cookie uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, parent)
	binary.BigEndian.PutUint64(b[8:], cookie)
	return b
}
