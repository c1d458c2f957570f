package host

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// sqePattern decodes annotated hex of a submission queue entry: '#'
// starts a comment, whitespace separates groups, and "??" stands for a
// byte the test does not pin (an address, a key, a CID). It returns the
// bytes and a mask of the pinned ones.
func sqePattern(t testing.TB, s string) (want, mask []byte) {
	t.Helper()
	for line := range strings.SplitSeq(s, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, f := range strings.Fields(line) {
			require.Zero(t, len(f)%2, "odd group %q", f)
			for i := 0; i < len(f); i += 2 {
				if f[i:i+2] == "??" {
					want, mask = append(want, 0), append(mask, 0)
					continue
				}
				v, err := hex.DecodeString(f[i : i+2])
				require.NoError(t, err)
				want, mask = append(want, v[0]), append(mask, 0xff)
			}
		}
	}
	return want, mask
}

// requireBytes checks got against annotated hex with wildcards.
func requireBytes(t testing.TB, pattern string, got []byte, what string) {
	t.Helper()
	want, mask := sqePattern(t, pattern)
	require.Len(t, got, len(want), "%s: length", what)
	masked := make([]byte, len(got))
	for i := range got {
		masked[i] = got[i] & mask[i]
	}
	require.Equal(t, hex.Dump(want), hex.Dump(masked), "%s\ngot:\n%s", what, hexCapsule(got))
}

// capsulesOf returns the capsules of queue qid, in arrival order.
func capsulesOf(recs []capsuleRecord, qid uint16) []capsuleRecord {
	var out []capsuleRecord
	for _, r := range recs {
		if r.qid == qid {
			out = append(out, r)
		}
	}
	return out
}

func TestWireConnectAndEnable(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	hostID := [16]byte{0x5a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xa5}
	const hostNQN = "nqn.2024-01.io.capsule:wire-host"
	c := dialResponder(t, r, WithQueues(2), WithQueueDepth(16), WithKeepAlive(3*time.Second),
		WithHostNQN(hostNQN), WithHostID(hostID))
	info, err := c.Info()
	require.NoError(t, err)
	assert.Equal(t, 2, info.Queues)
	assert.Equal(t, 16, info.QueueDepth)
	assert.Equal(t, 8192, info.InCapsule, "IOCCSZ of 8 KiB + 64")
	assert.Equal(t, 128<<10, info.MaxTransfer, "MDTS 5 in 4 KiB pages")

	// RDMA_CM private data: the admin queue, then each I/O queue with
	// the controller ID that Connect returned.
	cm := r.cmRequests()
	require.Len(t, cm, 3)
	assert.Equal(t, nvmeof.RDMACMRequest{QID: 0, HRQSize: 32, HSQSize: 31}, cm[0])
	assert.Equal(t, nvmeof.RDMACMRequest{QID: 1, HRQSize: 17, HSQSize: 16, CNTLID: info.CNTLID}, cm[1])
	assert.Equal(t, nvmeof.RDMACMRequest{QID: 2, HRQSize: 17, HSQSize: 16, CNTLID: info.CNTLID}, cm[2])

	var admin []capsuleRecord
	for _, rec := range capsulesOf(r.records(), 0) {
		if rec.capsule[0] != byte(nvmeof.AdminKeepAlive) { // a slow run may send one meanwhile
			admin = append(admin, rec)
		}
	}
	require.GreaterOrEqual(t, len(admin), 7, "capsules on the admin queue")

	// The admin Connect: Fabrics opcode, PSDT 01b as Linux sets it, the
	// 1024 bytes of data behind a keyed SGL that asks for invalidation,
	// SQSIZE 31 and KATO 3000 ms.
	requireBytes(t, `
		7f 40 ????    # OPC Fabrics, PSDT 01b, CID
		01 000000     # FCTYPE Connect, reserved
		0000000000000000 0000000000000000  # reserved, MPTR
		???????????????? 000400 ???????? 4f  # SGL1: address, length 1024, key, Keyed Data Block with invalidate
		0000 0000     # RECFMT 0, QID 0
		1f00 00 00    # SQSIZE 31 (0's based), CATTR 0, reserved
		b80b0000      # KATO 3000 ms
		00000000 00000000 00000000  # CDW13..15
	`, admin[0].capsule, "admin Connect")
	data := admin[0].keyed
	require.Len(t, data, nvmeof.ConnectDataSize)
	assert.Equal(t, hostID[:], data[nvmeof.ConnectDataOffsetHOSTID:16], "HOSTID")
	assert.Equal(t, []byte{0xff, 0xff}, data[nvmeof.ConnectDataOffsetCNTLID:18], "CNTLID FFFFh: any controller")
	assert.Equal(t, nqnBytes(respNQN), data[nvmeof.ConnectDataOffsetSUBNQN:512], "SUBNQN")
	assert.Equal(t, nqnBytes(hostNQN), data[nvmeof.ConnectDataOffsetHOSTNQN:768], "HOSTNQN")
	assert.Equal(t, make([]byte, 256), data[768:], "reserved")

	// Property Get CAP (8 bytes) and VS (4 bytes), no data: the null SGL
	// Linux sends (a keyed descriptor of length 0).
	requireBytes(t, `
		7f 40 ???? 04 000000   # Property Get
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40  # SGL1: keyed, all zero
		01 000000      # ATTRIB: 8 bytes
		00000000       # OFST CAP
		00000000 00000000 00000000 00000000
	`, admin[1].capsule, "Property Get CAP")
	requireBytes(t, `
		7f 40 ???? 04 000000
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40
		00 000000      # ATTRIB: 4 bytes
		08000000       # OFST VS
		00000000 00000000 00000000 00000000
	`, admin[2].capsule, "Property Get VS")
	// Property Set CC: EN, CSS NVM, MPS 4 KiB, AMS round robin, SHN
	// none, IOSQES 6 (64 bytes), IOCQES 4 (16 bytes).
	requireBytes(t, `
		7f 40 ???? 00 000000   # Property Set
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40
		00 000000      # ATTRIB: 4 bytes
		14000000       # OFST CC
		01004600 00000000   # VALUE: EN | IOSQES 6 | IOCQES 4
		00000000 00000000
	`, admin[3].capsule, "Property Set CC")
	i := 4
	for ; i < len(admin) && admin[i].capsule[0] == byte(nvmeof.OpFabrics); i++ {
		requireBytes(t, `
			7f 40 ???? 04 000000
			0000000000000000 0000000000000000
			0000000000000000 000000 00000000 40
			00 000000 1c000000   # 4 bytes, OFST CSTS
			00000000 00000000 00000000 00000000
		`, admin[i].capsule, "Property Get CSTS")
	}
	require.Less(t, i+1, len(admin))
	requireBytes(t, `
		06 40 ????     # Identify, PSDT 01b
		00000000       # NSID 0
		0000000000000000 0000000000000000
		???????????????? 001000 ???????? 4f  # SGL1: 4096 bytes, invalidate
		01000000       # CNS 01h, CNTID 0
		00000000 00000000 00000000 00000000 00000000
	`, admin[i].capsule, "Identify Controller")
	requireBytes(t, `
		09 40 ???? 00000000   # Set Features
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40
		07000000       # FID Number of Queues
		01000100       # NSQR 1, NCQR 1 (0's based: two each)
		00000000 00000000 00000000 00000000
	`, admin[i+1].capsule, "Set Features Number of Queues")

	// I/O queue Connect: the data in the capsule (SGL Data Block,
	// offset subtype), the controller ID Connect returned.
	for qid := uint16(1); qid <= 2; qid++ {
		io := capsulesOf(r.records(), qid)
		require.NotEmpty(t, io)
		got := io[0].capsule
		require.Len(t, got, nvmeof.CommandSize+nvmeof.ConnectDataSize, "SQE and in-capsule Connect data")
		var qidHex [2]byte
		binary.LittleEndian.PutUint16(qidHex[:], qid)
		requireBytes(t, `
			7f 40 ???? 01 000000
			0000000000000000 0000000000000000
			0000000000000000 00040000 000000 01  # SGL1: in-capsule, offset 0, 1024 bytes
			0000 `+hex.EncodeToString(qidHex[:])+`      # RECFMT, QID
			1000 00 00     # SQSIZE 16
			00000000       # KATO 0 on I/O queues
			00000000 00000000 00000000
		`, got[:nvmeof.CommandSize], "I/O Connect")
		d := got[nvmeof.CommandSize:]
		assert.Equal(t, hostID[:], d[:16])
		assert.Equal(t, info.CNTLID, binary.LittleEndian.Uint16(d[16:]), "CNTLID of the association")
		assert.Equal(t, nqnBytes(respNQN), d[256:512])
		assert.Equal(t, nqnBytes(hostNQN), d[512:768])
	}
}

func nqnBytes(s string) []byte {
	b := make([]byte, nvmeof.NQNFieldSize)
	copy(b, s)
	return b
}

func TestWireIOCommands(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	c := dialResponder(t, r, WithQueues(1))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	before := len(capsulesOf(r.records(), 1))

	small := make([]byte, 1024)
	pattern(small, 1, 0)
	_, err = ns.WriteAt(small, 4096) // in the capsule
	require.NoError(t, err)
	big := make([]byte, 64<<10)
	_, err = ns.WriteAt(big, 8192) // behind a keyed SGL
	require.NoError(t, err)
	rq := Request{Op: OpRead, Offset: 512 * 3, Buf: make([]byte, 4096), FUA: true}
	require.NoError(t, ns.Submit(&rq))
	require.NoError(t, rq.Wait())
	require.NoError(t, ns.Flush())
	require.NoError(t, ns.WriteZeroes(512*10, 512*4))
	require.NoError(t, ns.Discard(512*20, 512*6))

	io := capsulesOf(r.records(), 1)[before:]
	require.Equal(t, 6, len(io), "capsules on queue 1")
	requireBytes(t, `
		01 40 ????     # Write, PSDT 01b
		01000000       # NSID 1
		0000000000000000 0000000000000000
		0000000000000000 00040000 000000 01  # SGL1: in-capsule, offset 0, 1024 bytes
		08000000 00000000   # SLBA 8
		01000000       # NLB 1 (two blocks, 0's based), no FUA
		00000000 00000000 00000000
	`, io[0].capsule[:nvmeof.CommandSize], "small write")
	assert.Equal(t, small, io[0].capsule[nvmeof.CommandSize:], "in-capsule data")
	requireBytes(t, `
		01 40 ???? 01000000
		0000000000000000 0000000000000000
		???????????????? 000001 ???????? 40  # SGL1: keyed, 64 KiB, no invalidate
		10000000 00000000   # SLBA 16
		7f000000       # NLB 127
		00000000 00000000 00000000
	`, io[1].capsule, "large write")
	assert.Equal(t, big, io[1].keyed, "data the controller read")
	requireBytes(t, `
		02 40 ???? 01000000   # Read
		0000000000000000 0000000000000000
		???????????????? 001000 ???????? 40  # SGL1: keyed, 4096 bytes
		03000000 00000000   # SLBA 3
		07000040       # NLB 7, FUA (bit 30)
		00000000 00000000 00000000
	`, io[2].capsule, "read")
	requireBytes(t, `
		00 40 ???? 01000000   # Flush
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40
		00000000 00000000 00000000 00000000 00000000 00000000
	`, io[3].capsule, "flush")
	requireBytes(t, `
		08 40 ???? 01000000   # Write Zeroes
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40
		0a000000 00000000   # SLBA 10
		03000000       # NLB 3
		00000000 00000000 00000000
	`, io[4].capsule, "write zeroes")
	requireBytes(t, `
		09 40 ???? 01000000   # Dataset Management
		0000000000000000 0000000000000000
		0000000000000000 10000000 000000 01  # SGL1: in-capsule, 16 bytes
		00000000       # NR 0: one range
		04000000       # AD: deallocate
		00000000 00000000 00000000 00000000
		00000000 06000000 1400000000000000  # range: attributes, 6 blocks, SLBA 20
	`, io[5].capsule, "dataset management")
}
