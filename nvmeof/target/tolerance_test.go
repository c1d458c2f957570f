package target

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/nvmeof"
)

// The rows of the tolerance table (doc.go, "What the target accepts"),
// each both ways on the wire: what Linux nvmet and SPDK's nvmf_tgt take
// is taken, what the specification or safety forbids is refused. The
// refused side of the PDU rows is in TestTCPHostilePeers and
// nvmeof.TestTCPReceiverCheck.

// propertyGetCAP is a CapsuleCmd without data: Property Get of CAP with
// CID 0x0042, PDO as given (reserved without data), FLAGS as given.
func propertyGetCAP(flags, pdo string) string {
	return `
		04          # CapsuleCmd
		` + flags + ` # FLAGS
		48          # HLEN 72
		` + pdo + ` # PDO
		48000000    # PLEN 72: no in-capsule data
		7f          # SQE: opcode 7Fh, Fabrics
		00          # PSDT 00b
		4200        # CID 0x0042
		04          # FCTYPE 04h: Property Get
		` + zeros(35) + `
		01          # ATTRIB: 8 bytes
		000000      # reserved
		00000000    # OFST 0: CAP
		` + zeros(16)
}

func zeros(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '0', '0')
	}
	return string(b) + " # reserved\n"
}

func TestToleranceTCPHeaders(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	for _, tc := range []struct{ name, flags, pdo string }{
		{"PDO of a CapsuleCmd without data is reserved", "00", "48"},
		{"PDO of a CapsuleCmd without data, any value", "00", "ff"},
		{"flags a CapsuleCmd does not define are reserved", "f4", "00"},
		{"DDGSTF without data or data digest", "02", "00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := dialTCP(t, tt.url, 0)
			require.True(t, x.connect(0).Status.Success())
			x.write(hextest.Decode(t, propertyGetCAP(tc.flags, tc.pdo)))
			cqe, _ := x.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())
			assert.Equal(t, uint16(0x42), cqe.CID)
		})
	}
	t.Run("PDO past the header: padding the host chose", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		cmd, data := x.connectCmd(0)
		cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		cmd.SetPSDT(nvmeof.PSDTSGLBuffer)
		b := make([]byte, 80+len(data))
		copy(b, hextest.Decode(t, `
			04          # CapsuleCmd
			00          # FLAGS
			48          # HLEN 72
			50          # PDO 80: 8 bytes of padding after the SQE
			50040000    # PLEN 1104 = 80 + 1024
		`))
		_, err := cmd.MarshalTo(b[8:72])
		require.NoError(t, err)
		copy(b[80:], data)
		x.write(b)
		cqe, _ := x.response()
		require.True(t, cqe.Status.Success(), cqe.Status.String())
	})
	t.Run("reserved DGST bits of an ICReq", func(t *testing.T) {
		x := dialTCPRaw(t, tt.url)
		b := hextest.Decode(t, `
			00          # ICReq
			00          # FLAGS
			80          # HLEN 128
			00          # PDO
			80000000    # PLEN 128
			0000        # PFV 0
			00          # HPDA 0
			f1          # DGST: header digest, and reserved bits 7:4
			00000000    # MAXR2T 0
		`+zeros(112))
		x.write(b)
		h, pdu := x.read()
		require.Equal(t, nvmeof.TCPPDUICResp, h.Type)
		require.NoError(t, x.resp.UnmarshalBinary(pdu))
		assert.Equal(t, nvmeof.TCPHeaderDigest, x.resp.Digest, "only the defined bit comes back")
		x.hdgst = true
		require.True(t, x.connect(0).Status.Success())
	})
}

func TestToleranceConnectHostNQN(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	connect := func(t *testing.T, host []byte) nvmeof.Completion {
		x := dialTCP(t, tt.url, 0)
		cmd, data := x.connectCmd(0)
		copy(data[nvmeof.ConnectDataOffsetHOSTNQN:nvmeof.ConnectDataOffsetHOSTNQN+nvmeof.NQNFieldSize], host)
		cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		x.write(x.capsule(cmd, data))
		cqe, _ := x.response()
		return cqe
	}
	field := func(s string) []byte {
		f := make([]byte, nvmeof.NQNFieldSize)
		copy(f, s)
		return f
	}
	// An allow-list: an empty host NQN is not on it.
	cqe := connect(t, field(""))
	assert.Equal(t, nvmeof.StatusConnectInvalidHost.WithDNR().String(), cqe.Status.String())
	// Text after the NUL is ignored, as nvmet and SPDK ignore it.
	cqe = connect(t, field(testHostNQN+"\x00junk"))
	assert.True(t, cqe.Status.Success(), cqe.Status.String())
	// No NUL in the field: refused, naming HOSTNQN.
	cqe = connect(t, bytesOf('a', nvmeof.NQNFieldSize))
	assert.Equal(t, nvmeof.StatusConnectInvalidParameters.WithDNR().String(), cqe.Status.String())
	assert.Equal(t, nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetHOSTNQN}.DW0(), cqe.DW0)

	// Any host allowed: an empty host NQN connects (spdk_nvme_perf sends
	// one), as with nvmet and SPDK.
	tt.sub.SetAllowAnyHost(true)
	cqe = connect(t, field(""))
	assert.True(t, cqe.Status.Success(), cqe.Status.String())
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestToleranceControllerConfiguration(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	for _, tc := range []struct {
		name   string
		subnqn string
		css    uint8
		ok     bool
	}{
		{"NVM", testSubNQN, nvmeof.CCCSSNVM, true},
		{"all I/O command sets", testSubNQN, nvmeof.CCCSSAllIO, true},
		{"all I/O command sets on discovery", nvmeof.DiscoveryNQN, nvmeof.CCCSSAllIO, true},
		{"admin only on discovery", nvmeof.DiscoveryNQN, nvmeof.CCCSSAdminOnly, true},
		{"reserved CSS 1", testSubNQN, 1, false},
		{"admin only on an I/O controller", testSubNQN, nvmeof.CCCSSAdminOnly, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := dialTCP(t, tt.url, 0)
			cmd, data := x.connectCmd(0)
			copy(data[nvmeof.ConnectDataOffsetSUBNQN:nvmeof.ConnectDataOffsetSUBNQN+nvmeof.NQNFieldSize], make([]byte, nvmeof.NQNFieldSize))
			copy(data[nvmeof.ConnectDataOffsetSUBNQN:], tc.subnqn)
			cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
			x.write(x.capsule(cmd, data))
			cqe, _ := x.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())
			cc := nvmeof.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4).WithCSS(tc.css)
			set := nvmeof.PropertySet{CID: x.nextCID(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCC, Value: uint64(cc)}
			x.write(x.capsule(set.Command(), nil))
			cqe, _ = x.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())
			get := nvmeof.PropertyGet{CID: x.nextCID(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCSTS}
			x.write(x.capsule(get.Command(), nil))
			cqe, _ = x.response()
			csts := nvmeof.CSTS(cqe.DW0)
			assert.Equal(t, tc.ok, csts.RDY(), "%v", csts)
			assert.Equal(t, !tc.ok, csts.CFS(), "%v", csts)
		})
	}
}

// identifyTCP runs an Identify on a TCP admin queue and returns the
// completion and the data.
func identifyTCP(x *tcpInit, cns nvmeof.CNS, nsid uint32, csi uint8) (nvmeof.Completion, []byte) {
	c := nvmeof.Command{Opcode: nvmeof.AdminIdentify, CID: x.nextCID(), NSID: nsid}
	c.SetIdentify(cns, 0)
	c.CDW11 = uint32(csi) << 24
	c.DPTR = nvmeof.TransportSGL{Length: nvmeof.IdentifyDataSize}.Descriptor()
	x.write(x.capsule(c, nil))
	return x.response()
}

func TestToleranceIdentifyTCP(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	x := dialTCP(t, tt.url, 0)
	require.True(t, x.connect(0).Status.Success())
	x.enable()

	cqe, b := identifyTCP(x, nvmeof.CNSController, 0, 0)
	require.True(t, cqe.Status.Success())
	var id nvmeof.IdentifyController
	require.NoError(t, id.UnmarshalBinary(b))
	assert.Zero(t, id.SGLS&nvmeof.SGLSKeyedDataBlock, "no keyed SGLs on TCP")
	assert.NotZero(t, id.SGLS&nvmeof.SGLSOffsetAddress)
	assert.Equal(t, nvmeof.Version2_0, id.VER)

	// The I/O command set structures, for the NVM command set.
	cqe, b = identifyTCP(x, nvmeof.CNSControllerCommandSet, 0, nvmeof.CSINVM)
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	var nvm nvmeof.IdentifyControllerNVM
	require.NoError(t, nvm.UnmarshalBinary(b))
	assert.Equal(t, id.MDTS, nvm.WZSL)
	cqe, b = identifyTCP(x, nvmeof.CNSCommandSetList, 0, 0)
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	var sets nvmeof.CommandSetList
	require.NoError(t, sets.UnmarshalBinary(b))
	assert.Equal(t, nvmeof.CommandSetVectorNVM, sets[0])
	assert.Zero(t, sets[1])
	cqe, b = identifyTCP(x, nvmeof.CNSNamespaceCommandSet, 1, nvmeof.CSINVM)
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	assert.Equal(t, make([]byte, nvmeof.IdentifyDataSize), b)
	cqe, b = identifyTCP(x, nvmeof.CNSNamespaceIndependent, 1, 0)
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	var ind nvmeof.IdentifyNamespaceIndependent
	require.NoError(t, ind.UnmarshalBinary(b))
	assert.Equal(t, nvmeof.NSTATReady, ind.NSTAT)
	cqe, b = identifyTCP(x, nvmeof.CNSActiveNamespaceListCommandSet, 0, nvmeof.CSINVM)
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	assert.Equal(t, []byte{1, 0, 0, 0, 0}, b[:5])

	// Another command set: Invalid Field, as nvmet answers (SPDK's
	// zeros make SPDK's own host take ZNS for supported).
	for _, cns := range []nvmeof.CNS{nvmeof.CNSControllerCommandSet, nvmeof.CNSNamespaceCommandSet, nvmeof.CNSActiveNamespaceListCommandSet} {
		cqe, _ = identifyTCP(x, cns, 1, nvmeof.CSIZNS)
		assert.Equal(t, nvmeof.StatusInvalidField.WithDNR().String(), cqe.Status.String(), "CNS %#x", cns)
	}

	// The error log names the transport the command came on.
	c := nvmeof.Command{Opcode: nvmeof.AdminGetLogPage, CID: x.nextCID()}
	require.NoError(t, c.SetGetLogPage(nvmeof.LogErrorInformation, 0, nvmeof.ErrorLogEntrySize))
	c.DPTR = nvmeof.TransportSGL{Length: nvmeof.ErrorLogEntrySize}.Descriptor()
	x.write(x.capsule(c, nil))
	cqe, b = x.response()
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	var e nvmeof.ErrorLogEntry
	require.NoError(t, e.UnmarshalBinary(b))
	assert.Equal(t, nvmeof.TransportTCP, e.TRTYPE)
	assert.Equal(t, nvmeof.AdminIdentify, e.Opcode)
}

func TestToleranceNoDataAnySGL(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	admin := dialTCP(t, tt.url, 0)
	require.True(t, admin.connect(0).Status.Success())
	admin.enable()
	io := dialTCP(t, tt.url, 0)
	io.cntlid = admin.cntlid
	require.True(t, io.connect(1).Status.Success())
	for _, tc := range []struct{ name, sgl string }{
		{"all zeros", `00000000 00000000 00000000 00000000`},
		{"Data Block, an address, length 0", `00100000 00000000 00000000 00000000`},
		{"Keyed Data Block on TCP", `00000000 00000000 00100000 00000040`},
		{"Bit Bucket", `00000000 00000000 00020000 00000010`},
		{"reserved type Fh", `00000000 00000000 00000000 000000f0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Write Zeroes of 8 blocks (NLB 7) and Flush move no data:
			// they complete whatever SGL1 holds.
			for _, op := range []nvmeof.Opcode{nvmeof.IOWriteZeroes, nvmeof.IOFlush} {
				c := nvmeof.Command{Opcode: op, NSID: 1, CID: io.nextCID()}
				if op == nvmeof.IOWriteZeroes {
					c.SetSLBA(0)
					c.SetBlocks(8)
				}
				copy(c.DPTR[:], hextest.Decode(t, tc.sgl))
				io.write(io.capsule(c, nil))
				cqe, _ := io.response()
				assert.True(t, cqe.Status.Success(), "%v: %v", op, cqe.Status)
			}
		})
	}
	// A command that moves data still needs an SGL that describes it.
	c := nvmeof.Command{Opcode: nvmeof.IORead, NSID: 1, CID: io.nextCID()}
	c.SetBlocks(1)
	copy(c.DPTR[:], hextest.Decode(t, `00000000 00000000 00020000 00000040 # keyed, 512 bytes`))
	io.write(io.capsule(c, nil))
	cqe, _ := io.response()
	assert.Equal(t, nvmeof.StatusSGLDescriptorTypeInvalid.WithDNR().String(), cqe.Status.String())
}

func TestToleranceFeatures(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	x := dialTCP(t, tt.url, 0)
	require.True(t, x.connect(0).Status.Success())
	x.enable()
	feature := func(op nvmeof.Opcode, fid nvmeof.FeatureID, v uint32, sgl nvmeof.SGLDescriptor) (nvmeof.Completion, []byte) {
		c := nvmeof.Command{Opcode: op, CID: x.nextCID()}
		c.CDW10, c.CDW11 = uint32(fid), v
		c.DPTR = sgl
		x.write(x.capsule(c, nil))
		return x.response()
	}
	// What spdk_nvme_identify and SPDK's host ask for.
	for _, fid := range []nvmeof.FeatureID{0x01, 0x02, 0x04, 0x05} {
		cqe, _ := feature(nvmeof.AdminGetFeatures, fid, 0, nvmeof.SGLDescriptor{})
		assert.True(t, cqe.Status.Success(), "Get Features %#x: %v", fid, cqe.Status)
	}
	cqe, _ := feature(nvmeof.AdminSetFeatures, nvmeof.FeatureAsyncEventConfig, 0x11f, nvmeof.SGLDescriptor{})
	assert.True(t, cqe.Status.Success(), cqe.Status.String())
	// Host Identifier: the 128-bit one Connect carried, as data.
	cqe, b := feature(nvmeof.AdminGetFeatures, nvmeof.FeatureHostIdentifier, 1, nvmeof.TransportSGL{Length: 16}.Descriptor())
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	assert.Len(t, b, 16)
	cqe, _ = feature(nvmeof.AdminGetFeatures, nvmeof.FeatureHostIdentifier, 0, nvmeof.TransportSGL{Length: 16}.Descriptor())
	assert.Equal(t, nvmeof.StatusInvalidField.WithDNR().String(), cqe.Status.String(), "the 64-bit host identifier")
}
