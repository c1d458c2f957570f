package target

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// FuzzCommand sends arbitrary command capsules to a live target over shm
// and requires an answer to every one: whatever the bytes, the target
// answers with a status (it never crashes, and never drops a command or
// the connection over one). Keyed SGLs are pointed at the initiator's
// real region, with their lengths kept, because a bad key is meant to end
// the connection (TestBadInputFatal); AERs become Keep Alives, since they
// are answered only on an event.
func FuzzCommand(f *testing.F) {
	seed := func(admin bool, c nvmeof.Command, inCapsule []byte) {
		b, _ := c.MarshalBinary()
		f.Add(admin, append(b, inCapsule...))
	}
	seed(true, nvmeof.Command{Opcode: nvmeof.AdminIdentify, CDW10: 1, DPTR: keyedSeed(4096)}, nil)
	seed(true, nvmeof.Command{Opcode: nvmeof.AdminIdentify, NSID: 1, DPTR: keyedSeed(4096)}, nil)
	seed(true, nvmeof.Command{Opcode: nvmeof.AdminGetLogPage, CDW10: 0x02 | 127<<16, DPTR: keyedSeed(512)}, nil)
	seed(true, nvmeof.Command{Opcode: nvmeof.AdminSetFeatures, CDW10: 0x07, CDW11: 0x30003}, nil)
	seed(true, nvmeof.Command{Opcode: nvmeof.AdminGetFeatures, CDW10: 0x0f | 3<<8}, nil)
	pg := nvmeof.PropertyGet{Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyCAP}
	seed(true, pg.Command(), nil)
	ps := nvmeof.PropertySet{Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCC, Value: 0x460001}
	seed(true, ps.Command(), nil)
	cn := nvmeof.Connect{SQSize: 15, SGL: nvmeof.InCapsuleSGL{Length: 1024}.Descriptor()}
	seed(true, cn.Command(), make([]byte, 1024))
	w := nvmeof.Command{Opcode: nvmeof.IOWrite, NSID: 1, CDW12: 7, DPTR: nvmeof.InCapsuleSGL{Length: 4096}.Descriptor()}
	seed(false, w, make([]byte, 4096))
	seed(false, nvmeof.Command{Opcode: nvmeof.IORead, NSID: 1, CDW10: 100, CDW12: 7, DPTR: keyedSeed(4096)}, nil)
	seed(false, nvmeof.Command{Opcode: nvmeof.IORead, NSID: 1, CDW12: 0xffff, DPTR: keyedSeed(1 << 20)}, nil)
	seed(false, nvmeof.Command{Opcode: nvmeof.IODatasetManagement, NSID: 1, CDW10: 1, CDW11: 4, DPTR: keyedSeed(32)}, nil)
	seed(false, nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: 1, CDW10: 5, CDW12: 1 << 25}, nil)
	seed(false, nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: nvmeof.NSIDAll}, nil)
	dc := nvmeof.Disconnect{}
	seed(false, dc.Command(), nil)
	seed(false, nvmeof.Command{Opcode: 0x7f, NSID: 0x44}, nil)
	seed(false, nvmeof.Command{Opcode: nvmeof.IOWrite, NSID: 1, DPTR: nvmeof.SGLDescriptor{15: 0x31, 8: 32}}, make([]byte, 64))

	// The target logs nowhere: a fuzz target may not log through f.
	tt := newTestTarget(f, transports()["shm"](), WithLogger(slog.New(slog.DiscardHandler)))
	var admin, io *rawQueue
	var cleanups []func()
	f.Cleanup(func() {
		for _, fn := range cleanups {
			fn()
		}
	})
	connect := func(t *testing.T) {
		if admin != nil {
			admin.close()
			io.close()
		}
		// The queues outlive the input that made them: their cleanups
		// run when fuzzing ends.
		kept := keptTB{TB: t, cleanups: &cleanups}
		admin = adminQueue(kept, tt.url, testSubNQN, 0)
		io = ioQueue(kept, tt.url, admin, 1, 32)
	}
	f.Fuzz(func(t *testing.T, onAdmin bool, capsule []byte) {
		if len(capsule) < nvmeof.CommandSize || len(capsule) > nvmeof.CommandSize+DefaultInCapsuleDataSize {
			return
		}
		if admin == nil || admin.qp.Err() != nil || io.qp.Err() != nil {
			connect(t)
		}
		admin.t, io.t = t, t
		q := io
		if onAdmin {
			q = admin
		}
		c, inCapsule, err := nvmeof.ParseCapsule(capsule)
		require.NoError(t, err)
		if onAdmin && c.Opcode == nvmeof.AdminAsyncEventRequest {
			c.Opcode = nvmeof.AdminKeepAlive
		}
		if k, ok := c.DPTR.Keyed(); ok {
			k.Address, k.Key, k.Invalidate = q.data.Addr(), q.data.RKey(), false
			k.Length = min(k.Length, rawDataSize)
			c.DPTR, _ = k.Descriptor()
		}
		c.CID = q.cid()
		q.submit(&c, inCapsule)
		_, ok := q.poll(c.CID, 5*time.Second)
		require.True(t, ok, "no answer to %v (QP %v)", c.String(), q.qp.Err())
		// A reset, a shutdown or a Disconnect the bytes asked for may end
		// queues; the next input starts afresh.
		if !c.IsFabrics() || c.FabricsType() == nvmeof.FabricsConnect {
			return
		}
		admin.close()
		io.close()
		admin, io = nil, nil
	})
}

// keyedSeed is a Keyed SGL of n bytes for a seed; FuzzCommand gives it
// the real address and key.
func keyedSeed(n uint32) nvmeof.SGLDescriptor {
	d, _ := nvmeof.KeyedSGL{Length: n, Key: 1}.Descriptor()
	return d
}

// keptTB is a testing.TB whose cleanups are collected rather than run at
// the end of the current test.
type keptTB struct {
	testing.TB
	cleanups *[]func()
}

func (k keptTB) Cleanup(fn func()) { *k.cleanups = append(*k.cleanups, fn) }
