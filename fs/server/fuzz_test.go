package server

import (
	"encoding/binary"
	"testing"

	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
)

// FuzzHandler feeds arbitrary commands, request bytes and reply buffer
// sizes to a server, as a host could send them: PrepareVendor refuses or
// ExecuteVendor answers, never a panic, and the reply length fits the
// buffer. (One server serves every input, so inputs build on each other.)
func FuzzHandler(f *testing.F) {
	seed := func(op nvmeof.Opcode, a0, a1 uint64, cdw14, cdw15 uint32, in []byte, outLen int) {
		b := make([]byte, 32)
		b[0] = byte(op)
		binary.LittleEndian.PutUint64(b[1:], a0)
		binary.LittleEndian.PutUint64(b[9:], a1)
		binary.LittleEndian.PutUint32(b[17:], cdw14)
		binary.LittleEndian.PutUint32(b[21:], cdw15)
		binary.LittleEndian.PutUint32(b[25:], uint32(outLen))
		f.Add(append(b, in...))
	}
	seed(proto.OpMkdir, 1, 0, 0o755, 0, []byte("d"), proto.AttrSize)
	seed(proto.OpCreate, 1, 0, 0o644, 0x42, []byte("f"), proto.CreateReplyLen)
	seed(proto.OpWrite, 2, 100, 0, 0, []byte("data"), 0)
	seed(proto.OpRead, 2, 0, 100, 0, nil, 100)
	seed(proto.OpRename, 1, 1, 0, 1, []byte("fg"), 0)
	seed(proto.OpSymlink, 1, 0, 0, 1, []byte("lt"), proto.AttrSize)
	seed(proto.OpReadDirPlus, 1, 0, 0, 0, nil, 4096)
	seed(proto.OpSetXattr, 2, 0, 0, 6, []byte("user.xvalue"), 0)
	sa := make([]byte, proto.SetAttrSize)
	(&proto.SetAttr{Valid: proto.SetSize, Size: 1 << 20}).MarshalTo(sa)
	seed(proto.OpSetAttr, 2, 0, 0, 0, sa, proto.AttrSize)
	pc := proto.Cred{UID: 1000, GID: 1000, Groups: []uint32{27}}
	rec := make([]byte, pc.Size())
	pc.MarshalTo(rec)
	seed(proto.OpCred, pc.ID(), 0, 0, 0, rec, 0)
	seed(proto.OpAccess, 2, 0, 4, 0, nil, 0)
	cr := make([]byte, proto.CopyRangeSize)
	(&proto.CopyRange{Ino: 2, Off: 0, Length: 100}).MarshalTo(cr)
	seed(proto.OpCopyRange, 3, 50, 0, 0, cr, 0)
	s := newServer(f, testOptions())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 32 {
			return
		}
		cmd := nvmeof.Command{Opcode: nvmeof.Opcode(b[0]) | 0x80, NSID: 1}
		proto.SetArgs(&cmd, binary.LittleEndian.Uint64(b[1:])%8, binary.LittleEndian.Uint64(b[9:])%(1<<34))
		cmd.CDW14 = binary.LittleEndian.Uint32(b[17:])
		cmd.CDW15 = binary.LittleEndian.Uint32(b[21:])
		outLen := int(binary.LittleEndian.Uint32(b[25:]) % (64 << 10))
		in := b[32:]
		vc, dataLen, payloadLen := vendorCommand(&cmd, in, outLen)
		if st := s.PrepareVendor(&cmd, dataLen, payloadLen); !st.Success() {
			return
		}
		if st := s.ExecuteVendor(vc); !st.Success() {
			t.Fatalf("status %v after a successful prepare", st)
		}
		if cmd.Opcode == proto.OpCopyRange {
			if vc.N != 0 || vc.DW1 > proto.MaxCopyRange {
				t.Fatalf("COPYRANGE: reply of %d bytes, DW1 %d", vc.N, vc.DW1)
			}
			return
		}
		if vc.N > dataLen || int(vc.DW1) != vc.N {
			t.Fatalf("reply of %d bytes (DW1 %d) in a %d-byte buffer", vc.N, vc.DW1, dataLen)
		}
	})
}
