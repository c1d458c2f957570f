package server

import (
	"encoding/binary"
	"syscall"

	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

var _ target.VendorHandler = (*Server)(nil)

// minReply is the smallest reply buffer each operation accepts.
func minReply(op nvmeof.Opcode) int {
	switch op {
	case proto.OpLookup, proto.OpGetAttr, proto.OpSetAttr, proto.OpMkdir, proto.OpMknod, proto.OpSymlink, proto.OpLink:
		return proto.AttrSize
	case proto.OpCreate:
		return proto.CreateReplyLen
	case proto.OpOpen:
		return proto.OpenReplyLen
	case proto.OpStatFS:
		return proto.StatFSSize
	case proto.OpReadDir:
		return proto.DirentHeader + proto.DirentSize(proto.MaxName, false)
	case proto.OpReadDirPlus:
		return proto.DirentHeader + proto.DirentSize(proto.MaxName, true)
	}
	return 0
}

// Which of CDW10-11 (the inode), CDW12, CDW13, CDW14 and CDW15 each
// operation uses (protocol.go's table); the others are reserved.
const (
	useIno = 1 << iota
	use12
	use13
	use14
	use15
)

var usedFields = map[nvmeof.Opcode]uint8{
	proto.OpLookup: useIno, proto.OpGetAttr: useIno, proto.OpSetAttr: useIno,
	proto.OpCreate: useIno | use12 | use13 | use14 | use15, proto.OpMkdir: useIno | use12 | use13 | use14,
	proto.OpMknod: useIno | use12 | use13 | use14 | use15, proto.OpSymlink: useIno | use12 | use13 | use15,
	proto.OpReadlink: useIno, proto.OpLink: useIno | use12 | use13, proto.OpUnlink: useIno, proto.OpRmdir: useIno,
	proto.OpRename: useIno | use12 | use13 | use14 | use15, proto.OpOpen: useIno | use12 | use13 | use14,
	proto.OpRelease: useIno | use12 | use13, proto.OpRead: useIno | use12 | use13 | use14,
	proto.OpWrite: useIno | use12 | use13 | use14, proto.OpFsync: useIno | use14,
	proto.OpReadDir: useIno | use12 | use13, proto.OpReadDirPlus: useIno | use12 | use13, proto.OpStatFS: 0,
	proto.OpFallocate: useIno | use12 | use13 | use14, proto.OpGetXattr: useIno, proto.OpSetXattr: useIno | use14 | use15,
	proto.OpListXattr: useIno, proto.OpRemoveXattr: useIno, proto.OpCred: useIno, proto.OpAccess: useIno | use14,
	proto.OpCopyRange: useIno | use12,
}

// reservedSet reports whether cmd sets a field its operation does not use.
func reservedSet(cmd *nvmeof.Command) bool {
	used := usedFields[cmd.Opcode]
	check := func(bit uint8, v uint32) bool { return used&bit == 0 && v != 0 }
	return check(useIno, cmd.CDW10|cmd.CDW11) || check(use12, cmd.CDW12) || check(use13, cmd.CDW13) ||
		check(use14, cmd.CDW14) || check(use15, cmd.CDW15) ||
		cmd.Opcode != proto.OpFallocate && !proto.HasRequestID(cmd.Opcode) && cmd.CDW2|cmd.CDW3 != 0 ||
		cmd.Opcode == proto.OpWrite && cmd.CDW14&^proto.WriteAppend != 0 ||
		cmd.Opcode == proto.OpFsync && cmd.CDW14&^proto.FsyncData != 0 ||
		cmd.Opcode == proto.OpCred && cmd.MPTR != 0
}

// PrepareVendor implements target.VendorHandler: the checks that make a
// command well formed (protocol.go, "Completions and errors").
func (s *Server) PrepareVendor(cmd *nvmeof.Command, dataLen, payloadLen int) nvmeof.Status {
	op := cmd.Opcode
	if proto.OpName(op) == "" {
		return nvmeof.StatusInvalidOpcode
	}
	if reservedSet(cmd) {
		return nvmeof.StatusInvalidField
	}
	if dataLen < minReply(op) {
		return nvmeof.StatusInvalidField
	}
	switch op {
	case proto.OpSetAttr:
		if payloadLen != proto.SetAttrSize {
			return nvmeof.StatusInvalidField
		}
	case proto.OpRead:
		if int(cmd.CDW14) > dataLen {
			return nvmeof.StatusInvalidField
		}
	case proto.OpCred:
		if dataLen < proto.CredFixed || dataLen > proto.CredFixed+4*proto.MaxGroups {
			return nvmeof.StatusInvalidField
		}
	case proto.OpCopyRange:
		if dataLen != proto.CopyRangeSize {
			return nvmeof.StatusInvalidField
		}
	case proto.OpSymlink, proto.OpRename, proto.OpSetXattr:
		n := payloadLen
		if op.Direction() == nvmeof.HostToController {
			n = dataLen
		}
		if cmd.CDW15>>16 != 0 || int(cmd.CDW15&0xffff) > n {
			return nvmeof.StatusInvalidField
		}
	}
	return nvmeof.StatusSuccess
}

// inlineReadMax is the largest read the queue goroutine runs itself
// (InlineVendor): a few sectors from the chunkstore's files, normally in
// the page cache, cost less than the hand-off to a worker and back.
const inlineReadMax = 16 << 10

// InlineVendor implements target.VendorInliner: reads of at most
// inlineReadMax run on the queue goroutine. Such a read waits only for a
// write of the same file holding its data lock, never for another
// command of the queue.
func (s *Server) InlineVendor(cmd *nvmeof.Command, dataLen int) bool {
	return cmd.Opcode == proto.OpRead && dataLen <= inlineReadMax
}

// ExecuteVendor implements target.VendorHandler: it runs one file
// operation and puts its errno in DW0 and the reply length in DW1.
func (s *Server) ExecuteVendor(c *target.VendorCommand) nvmeof.Status {
	cr, ok := s.creds.get(c.Cmd.MPTR)
	if !ok {
		// A credential this server does not hold (protocol.go,
		// "Credentials"): nothing runs and nothing is remembered, so
		// the host registers it and sends the command again.
		c.DW0, c.N, c.DW1 = uint32(syscall.ENOKEY), 0, 0
		return nvmeof.StatusSuccess
	}
	var r *reply
	if id := proto.Join(c.Cmd.CDW2, c.Cmd.CDW3); id != 0 && proto.HasRequestID(c.Cmd.Opcode) {
		var first bool
		if r, first = s.replies.begin(id); !first {
			// Sent again: answer with the first run's outcome.
			<-r.done
			c.DW0 = r.errno
			c.N = copy(c.Data, r.data)
			c.DW1 = uint32(c.N)
			return nvmeof.StatusSuccess
		}
	}
	n, err := s.execute(c, cr)
	moved := n
	if c.Cmd.Opcode == proto.OpWrite {
		moved = len(c.Payload) // a write's reply is empty: count the data it took
		if c.Cmd.Opcode.Direction() == nvmeof.HostToController {
			moved = len(c.Data)
		}
	}
	s.countOp(c.Cmd.Opcode, moved, err)
	c.DW0 = uint32(errnoOf(err))
	if err != nil {
		if c.DW0 == uint32(syscall.EIO) {
			s.log.Warn("fs: operation failed", "op", proto.OpName(c.Cmd.Opcode), "err", err)
		}
		n = 0
	}
	c.N, c.DW1 = n, uint32(n)
	if c.Cmd.Opcode == proto.OpCopyRange {
		c.N = 0 // DW1 counts the bytes copied; no reply data
	}
	if r != nil {
		s.replies.finish(r, c.DW0, c.Data[:n])
	}
	return nvmeof.StatusSuccess
}

func (s *Server) execute(c *target.VendorCommand, cr *cred) (int, error) {
	cmd := c.Cmd
	a0, a1 := proto.Arg0(cmd), proto.Arg1(cmd)
	uid, gid := cmd.CDW12, cmd.CDW13
	in := c.Payload
	if cmd.Opcode.Direction() == nvmeof.HostToController {
		in = c.Data
	}
	out := c.Data
	attr := func(a proto.Attr, err error) (int, error) {
		if err != nil {
			return 0, err
		}
		a.MarshalTo(out)
		return proto.AttrSize, nil
	}
	switch cmd.Opcode {
	case proto.OpLookup:
		return attr(s.lookup(cr, a0, in))
	case proto.OpGetAttr:
		return attr(s.getAttr(a0))
	case proto.OpSetAttr:
		var sa proto.SetAttr
		if err := sa.Unmarshal(in); err != nil {
			return 0, syscall.EINVAL
		}
		return attr(s.setAttr(cr, a0, &sa))
	case proto.OpCreate:
		a, h, err := s.create(cr, a0, in, cmd.CDW14, uid, gid, cmd.CDW15)
		if err != nil {
			return 0, err
		}
		a.MarshalTo(out)
		binary.LittleEndian.PutUint64(out[proto.AttrSize:], h)
		return proto.CreateReplyLen, nil
	case proto.OpMkdir:
		return attr(s.mkdir(cr, a0, in, cmd.CDW14, uid, gid))
	case proto.OpMknod:
		return attr(s.mknod(cr, a0, in, cmd.CDW14, cmd.CDW15, uid, gid))
	case proto.OpSymlink:
		name, target, _ := proto.SplitPair(in, cmd.CDW15)
		return attr(s.symlink(cr, a0, name, target, uid, gid))
	case proto.OpReadlink:
		return s.readlink(a0, out)
	case proto.OpLink:
		return attr(s.link(cr, a0, a1, in))
	case proto.OpUnlink:
		return 0, s.unlink(cr, a0, in, false)
	case proto.OpRmdir:
		return 0, s.unlink(cr, a0, in, true)
	case proto.OpRename:
		name, newName, _ := proto.SplitPair(in, cmd.CDW15)
		return 0, s.rename(cr, a0, name, a1, newName, cmd.CDW14)
	case proto.OpOpen:
		h, a, err := s.openIno(cr, a0, cmd.CDW14, true, a1)
		if err != nil {
			return 0, err
		}
		binary.LittleEndian.PutUint64(out, h)
		a.MarshalTo(out[proto.HandleSize:])
		return proto.OpenReplyLen, nil
	case proto.OpRelease:
		return 0, s.release(a0, a1)
	case proto.OpRead:
		return s.read(cr, a0, int64(a1), out[:cmd.CDW14])
	case proto.OpWrite:
		return s.write(cr, a0, int64(a1), in, cmd.CDW14&proto.WriteAppend != 0)
	case proto.OpFsync:
		if _, err := s.getAttr(a0); err != nil {
			return 0, err
		}
		return 0, s.Sync()
	case proto.OpReadDir, proto.OpReadDirPlus:
		return s.readDir(cr, a0, a1, out, cmd.Opcode == proto.OpReadDirPlus)
	case proto.OpStatFS:
		st := s.statFS()
		st.MarshalTo(out)
		return proto.StatFSSize, nil
	case proto.OpFallocate:
		return 0, s.fallocate(cr, a0, cmd.CDW14, int64(a1), int64(proto.Join(cmd.CDW2, cmd.CDW3)))
	case proto.OpGetXattr:
		return s.getXattr(cr, a0, in, out)
	case proto.OpSetXattr:
		name, value, _ := proto.SplitPair(in, cmd.CDW15)
		return 0, s.setXattr(cr, a0, name, value, cmd.CDW14)
	case proto.OpListXattr:
		return s.listXattr(cr, a0, out)
	case proto.OpRemoveXattr:
		return 0, s.removeXattr(cr, a0, in)
	case proto.OpCred:
		return 0, s.registerCred(a0, in)
	case proto.OpAccess:
		return 0, s.access(cr, a0, cmd.CDW14)
	case proto.OpCopyRange:
		var src proto.CopyRange
		if err := src.Unmarshal(in); err != nil {
			return 0, syscall.EINVAL
		}
		return s.copyRange(cr, src.Ino, int64(src.Off), a0, int64(a1), int64(src.Length))
	}
	return 0, syscall.ENOSYS
}
