package target

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/nvmeof"
)

// This file is a minimal NVMe/TCP initiator for the target's tests: it
// writes every PDU byte by byte, so that the tests can send what a real
// host never would and check each byte the target answers.

type tcpInit struct {
	t            testing.TB
	c            net.Conn
	br           *bufio.Reader
	hdgst, ddgst bool
	resp         nvmeof.TCPICResp
	cid          uint16
	cntlid       uint16
}

// dialTCP connects and exchanges ICReq/ICResp asking for digests dg.
func dialTCP(t testing.TB, url string, dg nvmeof.TCPDigestTypes) *tcpInit {
	t.Helper()
	x := dialTCPRaw(t, url)
	ic := nvmeof.TCPICReq{Digest: dg, MAXR2T: 0}
	b, err := ic.MarshalBinary()
	require.NoError(t, err)
	x.write(b)
	h, pdu := x.read()
	require.Equal(t, nvmeof.TCPPDUICResp, h.Type)
	require.NoError(t, x.resp.UnmarshalBinary(pdu))
	// What a Linux host insists on.
	require.EqualValues(t, 128, h.PLEN)
	require.Zero(t, x.resp.PFV)
	require.Zero(t, x.resp.CPDA)
	require.Equal(t, dg, x.resp.Digest)
	require.Zero(t, x.resp.MAXH2CDATA%4)
	require.GreaterOrEqual(t, x.resp.MAXH2CDATA, uint32(4096))
	x.hdgst, x.ddgst = dg&nvmeof.TCPHeaderDigest != 0, dg&nvmeof.TCPDataDigest != 0
	return x
}

func dialTCPRaw(t testing.TB, url string) *tcpInit {
	t.Helper()
	addr := strings.TrimPrefix(url, "tcp://")
	c, err := net.DialTimeout("tcp", addr, rawTimeout)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(rawTimeout))
	return &tcpInit{t: t, c: c, br: bufio.NewReader(c), cid: 1}
}

func (x *tcpInit) write(b []byte) {
	x.t.Helper()
	_, err := x.c.Write(b)
	require.NoError(x.t, err)
}

// read returns the next PDU whole.
func (x *tcpInit) read() (nvmeof.TCPHeader, []byte) {
	x.t.Helper()
	var ch [8]byte
	_, err := io.ReadFull(x.br, ch[:])
	require.NoError(x.t, err)
	h, err := nvmeof.ParseTCPHeader(ch[:])
	require.NoError(x.t, err)
	require.LessOrEqual(x.t, h.PLEN, uint32(4<<20))
	pdu := make([]byte, h.PLEN)
	copy(pdu, ch[:])
	_, err = io.ReadFull(x.br, pdu[8:])
	require.NoError(x.t, err)
	return h, pdu
}

// capsule builds a CapsuleCmd with in-capsule data (if any) and the
// digests negotiated.
func (x *tcpInit) capsule(cmd nvmeof.Command, data []byte) []byte {
	cmd.SetPSDT(nvmeof.PSDTSGLBuffer)
	hd := 0
	var flags nvmeof.TCPFlags
	if x.hdgst {
		hd, flags = 4, nvmeof.TCPFlagHDGSTF
	}
	plen, pdo := 72+hd, 0
	if len(data) > 0 {
		pdo = plen
		plen += len(data)
		if x.ddgst {
			flags |= nvmeof.TCPFlagDDGSTF
			plen += 4
		}
	}
	b := make([]byte, plen)
	nvmeof.PutTCPCapsuleHeader(b, nvmeof.TCPPDUCapsuleCmd, flags, uint8(pdo), uint32(plen))
	_, err := cmd.MarshalTo(b[8:72])
	require.NoError(x.t, err)
	if hd > 0 {
		nvmeof.PutTCPDigest(b[72:], b[:72])
	}
	if len(data) > 0 {
		copy(b[pdo:], data)
		if x.ddgst {
			nvmeof.PutTCPDigest(b[pdo+len(data):], data)
		}
	}
	return b
}

// response reads PDUs up to the CapsuleResp, collecting C2HData.
func (x *tcpInit) response() (nvmeof.Completion, []byte) {
	x.t.Helper()
	var data []byte
	for {
		h, pdu := x.read()
		hd := 0
		if x.hdgst {
			hd = 4
			require.True(x.t, nvmeof.TCPDigestMatches(pdu[h.HLEN:], nvmeof.TCPDigest(pdu[:h.HLEN])), "header digest of a %v", h.Type)
		}
		switch h.Type {
		case nvmeof.TCPPDUCapsuleResp:
			require.EqualValues(x.t, 24+hd, h.PLEN)
			var cqe nvmeof.Completion
			require.NoError(x.t, cqe.UnmarshalBinary(pdu[8:24]))
			return cqe, data
		case nvmeof.TCPPDUC2HData:
			p, err := nvmeof.ParseTCPDataPDU(pdu)
			require.NoError(x.t, err)
			require.EqualValues(x.t, len(data), p.DATAO)
			require.EqualValues(x.t, 24+hd, h.PDO)
			chunk := pdu[h.PDO : int(h.PDO)+int(p.DATAL)]
			if x.ddgst {
				require.True(x.t, nvmeof.TCPDigestMatches(pdu[int(h.PDO)+int(p.DATAL):], nvmeof.TCPDigest(chunk)))
			}
			data = append(data, chunk...)
			if h.Flags&nvmeof.TCPFlagSuccess != 0 {
				return nvmeof.Completion{CID: p.CCCID}, data
			}
		default:
			x.t.Fatalf("unexpected %v", h.Type)
		}
	}
}

func (x *tcpInit) nextCID() uint16 {
	x.cid++
	return x.cid
}

// connect sends a Connect for qid with its data in the capsule.
func (x *tcpInit) connect(qid uint16) nvmeof.Completion {
	x.t.Helper()
	cmd, data := x.connectCmd(qid)
	cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
	x.write(x.capsule(cmd, data))
	cqe, _ := x.response()
	if qid == 0 && cqe.Status.Success() {
		x.cntlid = nvmeof.ParseConnectResponse(cqe.DW0).CNTLID
	}
	return cqe
}

func (x *tcpInit) connectCmd(qid uint16) (nvmeof.Command, []byte) {
	cntlid := uint16(nvmeof.CNTLIDDynamic)
	if qid != 0 {
		cntlid = x.cntlid
	}
	c := nvmeof.Connect{CID: x.nextCID(), QID: qid, SQSize: 31, KATO: 30000}
	d := nvmeof.ConnectData{CNTLID: cntlid, SubNQN: testSubNQN, HostNQN: testHostNQN}
	data, err := d.MarshalBinary()
	require.NoError(x.t, err)
	return c.Command(), data
}

// enable sets CC.EN and waits for CSTS.RDY.
func (x *tcpInit) enable() {
	x.t.Helper()
	set := nvmeof.PropertySet{CID: x.nextCID(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCC, Value: 0x00460001}
	x.write(x.capsule(set.Command(), nil))
	cqe, _ := x.response()
	require.True(x.t, cqe.Status.Success(), cqe.Status.String())
	for range 100 {
		get := nvmeof.PropertyGet{CID: x.nextCID(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCSTS}
		x.write(x.capsule(get.Command(), nil))
		cqe, _ := x.response()
		if cqe.DW0&1 != 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	x.t.Fatal("CSTS.RDY never set")
}

// expectTerm reads a C2HTermReq with fes and fei and then the end of the
// connection.
func (x *tcpInit) expectTerm(fes nvmeof.TCPFES, fei int) {
	x.t.Helper()
	h, pdu := x.read()
	require.Equal(x.t, nvmeof.TCPPDUC2HTermReq, h.Type)
	var term nvmeof.TCPTermReq
	require.NoError(x.t, term.UnmarshalBinary(pdu))
	assert.Equal(x.t, fes, term.FES, "FES")
	assert.EqualValues(x.t, fei, term.FEI, "FEI")
	assert.NotEmpty(x.t, term.Data, "the header in error")
	_, err := x.br.ReadByte()
	require.ErrorIs(x.t, err, io.EOF, "the target closes the connection")
}

// liveAdmin is a second connection, a working admin queue, that every
// hostile test checks still works after the hostile one was terminated.
func liveAdmin(t *testing.T, tt *testTarget) func() {
	x := dialTCP(t, tt.url, 0)
	require.True(t, x.connect(0).Status.Success())
	return func() {
		t.Helper()
		get := nvmeof.PropertyGet{CID: x.nextCID(), Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyCAP}
		x.write(x.capsule(get.Command(), nil))
		cqe, _ := x.response()
		require.True(t, cqe.Status.Success(), "the other connection still works")
	}
}

func TestTCPReadWrite(t *testing.T) {
	for _, dg := range []nvmeof.TCPDigestTypes{0, nvmeof.TCPHeaderDigest | nvmeof.TCPDataDigest} {
		t.Run("digests"+string('0'+rune(dg)), func(t *testing.T) {
			tt := newTestTarget(t, "tcp://127.0.0.1:0")
			admin := dialTCP(t, tt.url, dg)
			require.True(t, admin.connect(0).Status.Success())
			admin.enable()
			io := dialTCP(t, tt.url, dg)
			io.cntlid = admin.cntlid
			require.True(t, io.connect(1).Status.Success())

			// A 4 KiB write in the capsule, a 64 KiB write through R2T,
			// both read back through C2HData.
			small := bytes.Repeat([]byte("capsule!"), 512)
			w := nvmeof.Command{Opcode: nvmeof.IOWrite, NSID: 1, CID: io.nextCID()}
			w.SetSLBA(0)
			w.SetBlocks(8)
			w.DPTR = nvmeof.InCapsuleSGL{Length: 4096}.Descriptor()
			io.write(io.capsule(w, small))
			cqe, _ := io.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())

			big := make([]byte, 64<<10)
			for i := range big {
				big[i] = byte(i * 7)
			}
			w = nvmeof.Command{Opcode: nvmeof.IOWrite, NSID: 1, CID: io.nextCID()}
			w.SetSLBA(8)
			w.SetBlocks(128)
			w.DPTR = nvmeof.TransportSGL{Length: uint32(len(big))}.Descriptor()
			io.write(io.capsule(w, nil))
			h, pdu := io.read()
			require.Equal(t, nvmeof.TCPPDUR2T, h.Type)
			r2t, err := nvmeof.ParseTCPDataPDU(pdu)
			require.NoError(t, err)
			assert.Equal(t, w.CID, r2t.CCCID)
			assert.EqualValues(t, 0, r2t.DATAO)
			assert.EqualValues(t, len(big), r2t.DATAL)
			// Two H2CData PDUs of 32 KiB each.
			for off := 0; off < len(big); off += 32 << 10 {
				io.write(io.h2cData(r2t.CCCID, r2t.TTAG, uint32(off), big[off:off+32<<10], off+32<<10 == len(big)))
			}
			cqe, _ = io.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())

			r := nvmeof.Command{Opcode: nvmeof.IORead, NSID: 1, CID: io.nextCID()}
			r.SetSLBA(0)
			r.SetBlocks(136)
			r.DPTR = nvmeof.TransportSGL{Length: 136 * 512}.Descriptor()
			io.write(io.capsule(r, nil))
			cqe, data := io.response()
			require.True(t, cqe.Status.Success(), cqe.Status.String())
			assert.Equal(t, append(append([]byte(nil), small...), big...), data)
		})
	}
}

// h2cData builds an H2CData PDU.
func (x *tcpInit) h2cData(cccid, ttag uint16, datao uint32, data []byte, last bool) []byte {
	hd, dd := 0, 0
	p := nvmeof.TCPDataPDU{Type: nvmeof.TCPPDUH2CData, CCCID: cccid, TTAG: ttag, DATAO: datao, DATAL: uint32(len(data))}
	if x.hdgst {
		hd = 4
		p.Flags |= nvmeof.TCPFlagHDGSTF
	}
	if x.ddgst {
		dd = 4
		p.Flags |= nvmeof.TCPFlagDDGSTF
	}
	if last {
		p.Flags |= nvmeof.TCPFlagLastPDU
	}
	pdo := 24 + hd
	b := make([]byte, pdo+len(data)+dd)
	p.MarshalTo(b, uint8(pdo), uint32(len(b)))
	if hd > 0 {
		nvmeof.PutTCPDigest(b[24:], b[:24])
	}
	copy(b[pdo:], data)
	if dd > 0 {
		nvmeof.PutTCPDigest(b[pdo+len(data):], data)
	}
	return b
}

// TestTCPHostilePeers sends what the specification forbids: each
// connection ends with the C2HTermReq the specification gives, and a
// second connection keeps working.
func TestTCPHostilePeers(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	check := liveAdmin(t, tt)

	t.Run("PDU before ICReq", func(t *testing.T) {
		x := dialTCPRaw(t, tt.url)
		cmd, data := x.connectCmd(0)
		cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		x.write(x.capsule(cmd, data))
		x.expectTerm(nvmeof.TCPFESPDUSequenceError, 0)
		check()
	})
	t.Run("ICReq with PFV 1", func(t *testing.T) {
		x := dialTCPRaw(t, tt.url)
		b, _ := (&nvmeof.TCPICReq{PFV: 1}).MarshalBinary()
		x.write(b)
		x.expectTerm(nvmeof.TCPFESUnsupportedParameter, nvmeof.TCPICOffsetPFV)
		check()
	})
	t.Run("PLEN larger than the maximum", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		x.write(hextest.Decode(t, `
			04          # CapsuleCmd
			00          # FLAGS
			48          # HLEN 72
			48          # PDO 72
			48000100    # PLEN 64 KiB + 72: more in-capsule data than IOCCSZ allows
		`))
		x.expectTerm(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPOffsetPLEN)
		check()
	})
	t.Run("H2CData beyond MAXH2CDATA", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		x.write(hextest.Decode(t, `
			06          # H2CData
			04          # FLAGS: LAST_PDU
			18          # HLEN 24
			18          # PDO 24
			18000800    # PLEN 24 + 512 KiB: twice MAXH2CDATA (MDTS)
		`))
		x.expectTerm(nvmeof.TCPFESDataLimitExceeded, 0)
		check()
	})
	t.Run("PDO inside the header", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		x.write(hextest.Decode(t, `
			04          # CapsuleCmd
			00          # FLAGS
			48          # HLEN 72
			40          # PDO 64: the data would overlap the SQE
			50040000    # PLEN 1104
		`))
		x.expectTerm(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPOffsetPDO)
		check()
	})
	t.Run("H2CData for an unknown CCCID", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		require.True(t, x.connect(0).Status.Success())
		x.write(x.h2cData(0x0bad, 0, 0, make([]byte, 512), true))
		x.expectTerm(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPDataOffsetCCCID)
		check()
	})
	t.Run("more data than the R2T granted", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		// Connect with its 1024 bytes of data behind a Transport SGL:
		// the target asks for them with an R2T.
		cmd, data := x.connectCmd(0)
		cmd.DPTR = nvmeof.TransportSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		x.write(x.capsule(cmd, nil))
		h, pdu := x.read()
		require.Equal(t, nvmeof.TCPPDUR2T, h.Type)
		r2t, err := nvmeof.ParseTCPDataPDU(pdu)
		require.NoError(t, err)
		require.EqualValues(t, nvmeof.ConnectDataSize, r2t.DATAL)
		x.write(x.h2cData(r2t.CCCID, r2t.TTAG, 0, append(data, make([]byte, 1024)...), true))
		x.expectTerm(nvmeof.TCPFESDataOutOfRange, nvmeof.TCPDataOffsetDATAL)
		check()
	})
	t.Run("header digest error", func(t *testing.T) {
		x := dialTCP(t, tt.url, nvmeof.TCPHeaderDigest)
		cmd, data := x.connectCmd(0)
		cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		b := x.capsule(cmd, data)
		b[72] ^= 0xff // the header digest
		x.write(b)
		x.expectTerm(nvmeof.TCPFESHeaderDigestError, 0)
		check()
	})
	t.Run("data digest error", func(t *testing.T) {
		// Not fatal: the command completes with Transient Transport
		// Error, does not run, and the connection stays.
		x := dialTCP(t, tt.url, nvmeof.TCPDataDigest)
		cmd, data := x.connectCmd(0)
		cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		b := x.capsule(cmd, data)
		b[len(b)-1] ^= 0xff
		x.write(b)
		cqe, _ := x.response()
		assert.True(t, errors.Is(cqe.Status, nvmeof.StatusTransientTransportError), cqe.Status.String())
		require.True(t, x.connect(0).Status.Success(), "the connection still works")
		check()
	})
	t.Run("H2CTermReq", func(t *testing.T) {
		x := dialTCP(t, tt.url, 0)
		b, _ := (&nvmeof.TCPTermReq{Type: nvmeof.TCPPDUH2CTermReq, FES: nvmeof.TCPFESPDUSequenceError}).MarshalBinary()
		x.write(b)
		_, err := x.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
		check()
	})
}

func TestTCPDiscoveryEntry(t *testing.T) {
	e, err := discoveryEntry("tcp://127.0.0.1:4420", 3)
	require.NoError(t, err)
	assert.Equal(t, nvmeof.TransportTCP, e.TRTYPE)
	assert.Equal(t, nvmeof.AddressFamilyIPv4, e.ADRFAM)
	assert.Equal(t, "127.0.0.1", e.TRADDR)
	assert.Equal(t, "4420", e.TRSVCID)
	assert.Equal(t, [nvmeof.TSASSize]byte{}, e.TSAS, "SECTYPE 0, no TLS")
	assert.EqualValues(t, 3, e.PORTID)

	e, err = discoveryEntry("fault+tcp://[::1]:8009", 1)
	require.NoError(t, err)
	assert.Equal(t, nvmeof.TransportTCP, e.TRTYPE)
	assert.Equal(t, nvmeof.AddressFamilyIPv6, e.ADRFAM)

	e, err = discoveryEntry("iwarp://127.0.0.1:4420", 1)
	require.NoError(t, err)
	assert.Equal(t, nvmeof.TransportRDMA, e.TRTYPE)
}
