package host

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// The bytes of the PDUs the proxy below looks at (NVMe/TCP 1.0, 3.6):
//
//	common header   byte 0 PDU-Type, 1 FLAGS (bit 0 HDGSTF, 1 DDGSTF,
//	                2 LAST_PDU, 3 SUCCESS), 2 HLEN, 3 PDO, 4-7 PLEN
//	C2HData (07h)   8-9 CCCID, 12-15 DATAO, 16-19 DATAL; HLEN 24, then
//	                HDGST (4 bytes) if HDGSTF, padding to PDO, the data,
//	                and DDGST, the last 4 bytes of PLEN, if DDGSTF
//	CapsuleResp     8-23 the CQE, whose CID is its bytes 12-13 (bytes
//	(05h)           20-21 of the PDU)
const (
	ddgstTypeC2HData     = 0x07
	ddgstTypeCapsuleResp = 0x05
	ddgstFlagHDGSTF      = 1 << 0
	ddgstFlagDDGSTF      = 1 << 1
	ddgstFlagSuccess     = 1 << 3
	ddgstC2HDataHLEN     = 24
	ddgstOffCCCID        = 8
	ddgstOffRespCID      = 8 + 12
)

// What the proxy does to the next C2HData PDU of an I/O queue.
const (
	ddgstPass int32 = iota
	// ddgstCorrupt flips a bit of its data digest.
	ddgstCorrupt
	// ddgstCorruptSuccess also sets SUCCESS (its header digest made
	// again) and withholds the command's CapsuleResp, as a controller
	// that completes a read with its C2HData would send it.
	ddgstCorruptSuccess
)

// ddgstProxy sits between a host and the target on NVMe/TCP: it passes
// the host's bytes on untouched and the controller's PDU by PDU, breaking
// the data digest of one C2HData when armed.
type ddgstProxy struct {
	ln     net.Listener
	target string // the target's HOST:PORT

	arm       atomic.Int32 // ddgstPass or the fault for the next C2HData
	corrupted atomic.Int32 // C2HData PDUs broken
	accepted  atomic.Int32 // connections from the host

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newDDGSTProxy(t *testing.T, targetURL string) *ddgstProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &ddgstProxy{ln: ln, target: strings.TrimPrefix(targetURL, "tcp://")}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

func (p *ddgstProxy) url() string { return "tcp://" + p.ln.Addr().String() }

func (p *ddgstProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		h, err := p.ln.Accept()
		if err != nil {
			return
		}
		// The host connects the admin queue first; the rest are I/O
		// queues.
		ioQueue := p.accepted.Add(1) > 1
		c, err := net.Dial("tcp", p.target)
		if err != nil {
			h.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, h, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(c, h)
			c.Close()
			h.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.toHost(h, c, ioQueue)
			c.Close()
			h.Close()
		}()
	}
}

// toHost passes the controller's PDUs to the host, doing to the C2HData
// of an I/O queue what the proxy is armed with.
func (p *ddgstProxy) toHost(h, c net.Conn, ioQueue bool) {
	br := bufio.NewReader(c)
	var drop uint32 // CID+1 of the CapsuleResp to withhold
	for {
		var ch [8]byte
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			return
		}
		plen := binary.LittleEndian.Uint32(ch[4:8])
		if plen < 8 {
			return
		}
		pdu := make([]byte, plen)
		copy(pdu, ch[:])
		if _, err := io.ReadFull(br, pdu[8:]); err != nil {
			return
		}
		switch pdu[0] {
		case ddgstTypeC2HData:
			if !ioQueue || pdu[1]&ddgstFlagDDGSTF == 0 {
				break
			}
			fault := p.arm.Swap(ddgstPass)
			if fault == ddgstPass {
				break
			}
			pdu[plen-1] ^= 0x01 // a bit of DDGST
			if fault == ddgstCorruptSuccess {
				pdu[1] |= ddgstFlagSuccess
				if pdu[1]&ddgstFlagHDGSTF != 0 {
					nvmeof.PutTCPDigest(pdu[ddgstC2HDataHLEN:], pdu[:ddgstC2HDataHLEN])
				}
				drop = uint32(binary.LittleEndian.Uint16(pdu[ddgstOffCCCID:])) + 1
			}
			p.corrupted.Add(1)
		case ddgstTypeCapsuleResp:
			if drop != 0 && uint32(binary.LittleEndian.Uint16(pdu[ddgstOffRespCID:]))+1 == drop {
				drop = 0
				continue
			}
		}
		if _, err := h.Write(pdu); err != nil {
			return
		}
	}
}

func (p *ddgstProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestTCPDataDigestErrorNotFatal breaks the data digest of one read's
// C2HData: that read fails with Transient Transport Error (not retried,
// DNR clear), the next read on the same I/O queue succeeds, and the
// connection was never dropped. Once with the CapsuleResp following the
// C2HData, once with SUCCESS on the C2HData and no CapsuleResp; for reads
// placed straight into the caller's buffer and for reads through the
// slot's memory.
func TestTCPDataDigestErrorNotFatal(t *testing.T) {
	rt := newTarget(t, "tcp://127.0.0.1:0", 1<<20, 4096, nil)
	p := newDDGSTProxy(t, rt.addr)
	// WithSubsystem: through discovery the host would dial the target's
	// own address, not the proxy.
	c := dialTarget(t, &realTarget{tgt: rt.tgt, sub: rt.sub, addr: p.url()}, WithSubsystem(targetNQN),
		WithQueues(1), WithTCPDigests(true, true))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	want := make([]byte, 64<<10)
	pattern(want, 7, 0)
	_, err = ns.WriteAt(want, 0)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		fault int32
		off   int64
		n     int
	}{
		{"CapsuleResp/in place", ddgstCorrupt, 0, 16 << 10},
		{"CapsuleResp/unaligned", ddgstCorrupt, 1000, 9000},
		{"SUCCESS/in place", ddgstCorruptSuccess, 4096, 8192},
		{"SUCCESS/unaligned", ddgstCorruptSuccess, 333, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.corrupted.Load()
			p.arm.Store(tc.fault)
			buf := make([]byte, tc.n)
			_, err := ns.ReadAt(buf, tc.off)
			require.Equal(t, before+1, p.corrupted.Load(), "the read's C2HData was broken")
			require.Error(t, err)
			assert.ErrorIs(t, err, nvmeof.StatusTransientTransportError)
			assert.NotErrorIs(t, err, ErrControllerLost)
			var ce *CommandError
			require.True(t, errors.As(err, &ce), "%v", err)
			assert.Equal(t, uint16(1), ce.QID)
			assert.Equal(t, nvmeof.IORead, ce.Opcode)
			assert.False(t, ce.Status.DNR())

			// The same queue serves the next read.
			clear(buf)
			_, err = ns.ReadAt(buf, tc.off)
			require.NoError(t, err)
			require.Equal(t, want[tc.off:tc.off+int64(tc.n)], buf)
		})
	}
	st := c.Stats()
	assert.Zero(t, st.Losses)
	assert.Zero(t, st.Reconnects)
	assert.Equal(t, int32(2), p.accepted.Load(), "the admin queue and one I/O queue, never reconnected")
	assert.Equal(t, StateLive, c.State())
}
