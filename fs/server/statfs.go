package server

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// STATFS reports the store's real space after redundancy. Every stripe
// puts one shard on each of the K+M devices, so file data can grow by K
// shards for every shard the fullest device can still take. Devices may
// share a file system (several device directories on one disk), and then
// each stripe takes one shard per device from it: a file system holding
// d of the devices gives each of them a d-th of its space. The space in
// blocks, free and available for data is therefore
//
//	K × min over the devices' file systems f of (space of f / devices on f)
//
// with the file systems' own block, free and available counts
// (statfs(2)). Capacity, when set, bounds them too. A store whose devices
// are not directories statfs can read (in-memory devices in tests)
// reports Capacity, or, without one, the space in use plus what is left
// of 1 TiB.
//
// Inodes: the numbers left (they are never reused) and the room the
// fullest device has for its replica of the metadata, at
// statfsInodeBytes an inode, the smaller of the two, are free; files are
// those in use plus the free.

// statfsBlock is the block size STATFS reports.
const statfsBlock = 4096

// statfsInodeBytes is what STATFS takes one inode to cost in the
// metadata database: its record, one entry and its cookie, and B+tree
// overhead.
const statfsInodeBytes = 512

// fallbackSpace is the space reported when the devices cannot be asked.
const fallbackSpace = 1 << 40

// deviceSpace returns the data bytes the store's devices hold in all,
// have free and have available to unprivileged users, after redundancy,
// and false when some device's file system cannot be asked.
func (s *Server) deviceSpace() (total, free, avail int64, ok bool) {
	info := s.store.Info()
	type fsSpace struct {
		total, free, avail int64
		devices            int64
	}
	byDev := map[uint64]*fsSpace{}
	for _, d := range info.Devices {
		var st unix.Stat_t
		var sf unix.Statfs_t
		if d.Name == "" || unix.Stat(d.Name, &st) != nil || unix.Statfs(d.Name, &sf) != nil {
			return 0, 0, 0, false
		}
		f := byDev[st.Dev]
		if f == nil {
			bs := sf.Frsize
			if bs == 0 {
				bs = sf.Bsize
			}
			f = &fsSpace{total: int64(sf.Blocks) * bs, free: int64(sf.Bfree) * bs, avail: int64(sf.Bavail) * bs}
			byDev[st.Dev] = f
		}
		f.devices++
	}
	if len(byDev) == 0 {
		return 0, 0, 0, false
	}
	first := true
	for _, f := range byDev {
		t, fr, av := f.total/f.devices, f.free/f.devices, f.avail/f.devices
		if first || t < total {
			total = t
		}
		if first || fr < free {
			free = fr
		}
		if first || av < avail {
			avail = av
		}
		first = false
	}
	k := int64(info.Geometry.Data)
	return total * k, free * k, avail * k, true
}

func (s *Server) statFS() proto.StatFS {
	used := s.used.Load()
	total, free, avail, ok := s.deviceSpace()
	if !ok {
		total = max(fallbackSpace, used)
		free = total - used
		avail = free
	}
	if c := s.opt.Capacity; total > c {
		total = c
	}
	left := max(s.opt.Capacity-used, 0)
	free, avail = min(free, left, total), min(avail, left, total)

	inodes := uint64(max(s.inodes.Load(), 0))
	var next uint64
	_ = s.db.View(func(tx *memTx) error {
		if v := tx.Bucket(bucketSuper).Get(keyNextIno); len(v) == 8 {
			next = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	ffree := uint64(maxIno) - min(next, uint64(maxIno))
	if ok {
		// Every device holds a replica of the metadata: the fullest one
		// bounds the inodes.
		perDevice := avail / int64(s.store.Info().Geometry.Data)
		ffree = min(ffree, uint64(max(perDevice, 0))/statfsInodeBytes)
	}
	return proto.StatFS{
		Blocks: uint64(total / statfsBlock), Bfree: uint64(free / statfsBlock), Bavail: uint64(avail / statfsBlock),
		Files: inodes + ffree, Ffree: ffree, Bsize: statfsBlock, Frsize: statfsBlock, NameLen: proto.MaxName,
	}
}
