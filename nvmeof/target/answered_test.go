package target

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
)

// Every command is answered: random and mutated SQEs (every opcode, SGL
// type, PSDT and flag combination) go to the target one at a time, on
// the admin and an I/O queue, over NVMe/TCP and over the shm and iwarp
// RDMA providers. Each must get exactly one completion with its CID, or the
// connection must end with a reason in the target's log; then the test
// connects again and goes on (after a Disconnect the host asked for, it
// starts again without waiting for the target to close). Asynchronous
// Event Requests are left out: they are held until an event, by design.

// answeredCommands is the number of commands per queue and transport; the
// run stays at a few seconds.
const answeredCommands = 2000

// logRecorder keeps the target's log records, so a test can check that an ended connection was logged with its reason.
type logRecorder struct {
	mu   sync.Mutex // guards msgs
	msgs []string
	next slog.Handler
}

func (l *logRecorder) Enabled(ctx context.Context, lv slog.Level) bool { return true }

// Handle records r.
func (l *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	{
		var b strings.Builder
		fmt.Fprintf(&b, "%v ", r.Level)
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		l.mu.Lock()
		l.msgs = append(l.msgs, b.String())
		l.mu.Unlock()
	}
	return l.next.Handle(ctx, r)
}
func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrRecorder{l: l, attrs: as}
}
func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// since returns the records at Info and above after the first n.
func (l *logRecorder) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs[n:] {
		if !strings.HasPrefix(m, "DEBUG") {
			out = append(out, m)
		}
	}
	return out
}

// last returns the last n records of any level.
func (l *logRecorder) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs[max(0, len(l.msgs)-n):]...)
}

func (l *logRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}

type attrRecorder struct {
	l     *logRecorder
	attrs []slog.Attr
}

func (a *attrRecorder) Enabled(ctx context.Context, lv slog.Level) bool { return true }
func (a *attrRecorder) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(a.attrs...)
	return a.l.Handle(ctx, r)
}
func (a *attrRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrRecorder{l: a.l, attrs: append(append([]slog.Attr(nil), a.attrs...), as...)}
}
func (a *attrRecorder) WithGroup(string) slog.Handler { return a }

// answerSession is one association's queue under test.
type answerSession interface {
	// exchange sends c with inCapsule and returns its one completion, or
	// ended when the connection ended first. It fails the test on a
	// completion for another CID, or on none within the timeout.
	exchange(c nvmeof.Command, inCapsule []byte) (cqe nvmeof.Completion, ended bool)
	// sgl returns a data pointer of n bytes of the transport's own kind.
	sgl(n int) nvmeof.SGLDescriptor
	close()
}

// commandGen makes the random and mutated SQEs.
type commandGen struct {
	r     *rand.Rand
	admin bool
	own   func(n int) nvmeof.SGLDescriptor
}

var (
	adminOpcodes = []nvmeof.Opcode{0x02, 0x06, 0x08, 0x09, 0x0a, 0x18, 0x7f}
	ioOpcodes    = []nvmeof.Opcode{0x00, 0x01, 0x02, 0x08, 0x09, 0x0d, 0x0e, 0x11, 0x15, 0x7f, 0x80, 0x81, 0x82, 0x83}
	fctypes      = []uint8{0x00, 0x01, 0x04, 0x05, 0x08, 0x06, 0xff}
	logPageIDs   = []nvmeof.LogPageID{nvmeof.LogErrorInformation, nvmeof.LogSMARTHealth, nvmeof.LogFirmwareSlot,
		nvmeof.LogChangedNamespaceList, nvmeof.LogANA, nvmeof.LogDiscovery, nvmeof.LogReservationNotification, 0xc0}
)

func (g *commandGen) dword() uint32 {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return 7
	case 3:
		return uint32(g.r.IntN(256))
	case 4:
		return 0xffffffff
	}
	return g.r.Uint32()
}

func (g *commandGen) length() int {
	return []int{0, 512, 1024, 4096, 8192, 16 << 10, 256 << 10, 300 << 10, g.r.IntN(64 << 10)}[g.r.IntN(9)]
}

// descriptor returns SGL1 and the in-capsule bytes to send with it.
func (g *commandGen) descriptor() (nvmeof.SGLDescriptor, []byte) {
	n := g.length()
	var d nvmeof.SGLDescriptor
	switch g.r.IntN(8) {
	case 0: // NULL
	case 1: // the transport's own
		d = g.own(n)
	case 2: // in-capsule data, the right amount or not
		m := min(n, 8192)
		d = nvmeof.InCapsuleSGL{Offset: uint64(g.r.IntN(2) * 512), Length: uint32(n)}.Descriptor()
		return d, make([]byte, []int{m, 0, m / 2}[g.r.IntN(3)])
	case 3: // Keyed Data Block with a key nobody registered
		d, _ = nvmeof.KeyedSGL{Address: g.r.Uint64() >> 1, Length: uint32(n), Key: g.r.Uint32()}.Descriptor()
	case 4: // Transport SGL Data Block
		d = nvmeof.TransportSGL{Length: uint32(n)}.Descriptor()
	default: // anything at all
		for i := range d {
			d[i] = byte(g.r.UintN(256))
		}
	}
	return d, nil
}

// next returns a random SQE, or a valid one with a few bits flipped.
func (g *commandGen) next(cid uint16) (nvmeof.Command, []byte) {
	ops := ioOpcodes
	if g.admin {
		ops = adminOpcodes
	}
	var c nvmeof.Command
	if g.r.IntN(4) == 0 {
		c.Opcode = nvmeof.Opcode(g.r.UintN(256))
	} else {
		c.Opcode = ops[g.r.IntN(len(ops))]
	}
	c.NSID = []uint32{0, 1, 2, 0xffffffff, g.r.Uint32()}[g.r.IntN(5)]
	c.CDW10, c.CDW11, c.CDW12 = g.dword(), g.dword(), g.dword()
	c.CDW13, c.CDW14, c.CDW15 = g.dword(), g.dword(), g.dword()
	if c.Opcode == nvmeof.OpFabrics {
		c.NSID = uint32(fctypes[g.r.IntN(len(fctypes))]) // FCTYPE is byte 4
	}
	if g.admin && c.Opcode == nvmeof.AdminGetLogPage && g.r.IntN(2) == 0 {
		// Mostly the log pages served (the ANA log, 0Ch, among them),
		// any LSP, RAE and length.
		c.CDW10 = c.CDW10&^0xff | uint32(logPageIDs[g.r.IntN(len(logPageIDs))])
	}
	if !g.admin && (c.Opcode == nvmeof.IORead || c.Opcode == nvmeof.IOWrite) && g.r.IntN(2) == 0 {
		// Mostly sensible lengths for reads and writes.
		c.CDW10, c.CDW11, c.CDW12 = uint32(g.r.IntN(1<<15)), 0, uint32(g.r.IntN(64))
	}
	d, in := g.descriptor()
	c.DPTR = d
	b, _ := c.MarshalBinary()
	b[1] = byte(g.r.UintN(256)) // FUSE and PSDT, any combination
	if g.r.IntN(3) == 0 {
		for range 1 + g.r.IntN(3) {
			i := g.r.IntN(nvmeof.CommandSize)
			b[i] ^= 1 << g.r.IntN(8)
		}
	}
	if err := c.UnmarshalBinary(b); err != nil {
		panic(err) // every 64 bytes are a command
	}
	if g.admin && c.Opcode == nvmeof.AdminAsyncEventRequest {
		c.Opcode = nvmeof.AdminKeepAlive // held by design, not answered
	}
	c.CID = cid
	return c, in
}

func TestEveryCommandAnswered(t *testing.T) {
	for _, tr := range []string{"tcp", "shm", "iwarp"} {
		t.Run(tr, func(t *testing.T) {
			rec := &logRecorder{next: slog.NewTextHandler(io.Discard, nil)}
			tg, err := New(WithLogger(slog.New(rec)))
			require.NoError(t, err)
			t.Cleanup(func() { tg.Close() })
			sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, Hosts: []string{testHostNQN}})
			require.NoError(t, err)
			mem, err := blockdev.NewMemory(16 << 20)
			require.NoError(t, err)
			_, err = sub.AddNamespace(NamespaceConfig{NSID: 1, Device: mem, BlockSize: 512})
			require.NoError(t, err)
			listen := "tcp://127.0.0.1:0"
			if tr != "tcp" {
				listen = transports()[tr]()
			}
			url, err := tg.Listen(context.Background(), listen)
			require.NoError(t, err)
			for _, admin := range []bool{true, false} {
				name := "io"
				if admin {
					name = "admin"
				}
				t.Run(name, func(t *testing.T) {
					seed := uint64(time.Now().UnixNano())
					t.Logf("seed %d", seed)
					r := rand.New(rand.NewPCG(seed, 15))
					var s answerSession
					open := func() {
						if tr == "tcp" {
							s = openTCPAnswer(t, url, admin)
						} else {
							s = openRDMAAnswer(t, url, admin)
						}
					}
					open()
					answered, ended := 0, 0
					for i := range answeredCommands {
						g := commandGen{r: r, admin: admin, own: s.sgl}
						c, in := g.next(uint16(i + 100))
						logged := rec.count()
						cqe, gone := s.exchange(c, in)
						if !gone {
							answered++
							if c.Opcode == nvmeof.OpFabrics && c.FabricsType() == nvmeof.FabricsDisconnect && cqe.Status.Success() {
								// The host deleted the queue: the target closes
								// the connection soon; start again.
								s.close()
								open()
							}
							continue
						}
						ended++
						// The connection ended: the target says why.
						require.Eventually(t, func() bool { return len(rec.since(logged)) > 0 }, 5*time.Second, 10*time.Millisecond,
							"connection ended after opcode %#x (SQE %x) with nothing in the log; last records:\n%s",
							c.Opcode, sqeBytes(c), strings.Join(rec.last(8), "\n"))
						s.close()
						open()
					}
					t.Logf("%d answered, %d connections ended", answered, ended)
					s.close()
				})
			}
		})
	}
}

func sqeBytes(c nvmeof.Command) []byte {
	b, _ := c.MarshalBinary()
	return b
}

// --- NVMe/TCP ---

type tcpAnswer struct {
	t     *testing.T
	c     net.Conn
	br    *bufio.Reader
	admin bool
}

func openTCPAnswer(t *testing.T, url string, admin bool) answerSession {
	a := dialTCP(t, url, 0)
	require.True(t, a.connect(0).Status.Success())
	a.enable()
	x := a
	if !admin {
		x = dialTCP(t, url, 0)
		x.cntlid = a.cntlid
		require.True(t, x.connect(1).Status.Success())
	}
	x.c.SetDeadline(time.Time{})
	return &tcpAnswer{t: t, c: x.c, br: x.br, admin: admin}
}

func (s *tcpAnswer) sgl(n int) nvmeof.SGLDescriptor {
	return nvmeof.TransportSGL{Length: uint32(n)}.Descriptor()
}
func (s *tcpAnswer) close() { s.c.Close() }

// readPDU returns the next PDU whole, or an error when the connection
// ended.
func (s *tcpAnswer) readPDU() (nvmeof.TCPHeader, []byte, error) {
	var ch [8]byte
	if _, err := io.ReadFull(s.br, ch[:]); err != nil {
		return nvmeof.TCPHeader{}, nil, err
	}
	h, _ := nvmeof.ParseTCPHeader(ch[:])
	if h.PLEN < 8 || h.PLEN > 2<<20 {
		return h, nil, fmt.Errorf("PLEN %d", h.PLEN)
	}
	pdu := make([]byte, h.PLEN)
	copy(pdu, ch[:])
	_, err := io.ReadFull(s.br, pdu[8:])
	return h, pdu, err
}

func (s *tcpAnswer) exchange(c nvmeof.Command, in []byte) (nvmeof.Completion, bool) {
	x := &tcpInit{t: s.t}
	pdu := x.capsule(c, in)
	pdu[9] = sqeBytes(c)[1] // keep the generated FUSE and PSDT
	s.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.c.Write(pdu); err != nil {
		return nvmeof.Completion{}, true
	}
	for {
		h, b, err := s.readPDU()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return nvmeof.Completion{}, true
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			s.t.Fatalf("no completion for CID %#x (SQE %x)", c.CID, sqeBytes(c))
		}
		require.NoError(s.t, err)
		switch h.Type {
		case nvmeof.TCPPDUC2HTermReq:
			return nvmeof.Completion{}, true
		case nvmeof.TCPPDUR2T:
			p, _ := nvmeof.ParseTCPDataPDU(b)
			require.Equal(s.t, c.CID, p.CCCID, "an R2T for another command")
			if _, err := s.c.Write(x.h2cData(p.CCCID, p.TTAG, p.DATAO, make([]byte, p.DATAL), true)); err != nil {
				return nvmeof.Completion{}, true
			}
		case nvmeof.TCPPDUC2HData:
			p, _ := nvmeof.ParseTCPDataPDU(b)
			require.Equal(s.t, c.CID, p.CCCID, "data for another command")
			if h.Flags&nvmeof.TCPFlagSuccess != 0 {
				return nvmeof.Completion{CID: p.CCCID}, false
			}
		case nvmeof.TCPPDUCapsuleResp:
			var cqe nvmeof.Completion
			require.NoError(s.t, cqe.UnmarshalBinary(b[8:24]))
			require.Equal(s.t, c.CID, cqe.CID, "a completion for another command (SQE %x)", sqeBytes(c))
			return cqe, false
		default:
			s.t.Fatalf("unexpected %v", h.Type)
		}
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset by peer") || strings.Contains(err.Error(), "broken pipe"))
}

// --- RDMA (shm) ---

type rdmaAnswer struct {
	t     *testing.T
	q     *rawQueue
	admin bool
}

func openRDMAAnswer(t *testing.T, url string, admin bool) answerSession {
	a := adminQueue(t, url, testSubNQN, 0)
	a.enable()
	q := a
	if !admin {
		q = ioQueue(t, url, a, 1, 32)
	}
	return &rdmaAnswer{t: t, q: q, admin: admin}
}

func (s *rdmaAnswer) sgl(n int) nvmeof.SGLDescriptor {
	if n > rawDataSize {
		n = rawDataSize
	}
	return s.q.keyed(0, n, false)
}

func (s *rdmaAnswer) close() { s.q.close() }

func (s *rdmaAnswer) exchange(c nvmeof.Command, in []byte) (nvmeof.Completion, bool) {
	if len(in) > s.q.capSize-nvmeof.CommandSize {
		in = in[:s.q.capSize-nvmeof.CommandSize]
	}
	b := sqeBytes(c)
	slot := int(c.CID % 64)
	buf := s.q.cmds.Bytes()[slot*s.q.capSize:]
	copy(buf, b) // the generated FUSE and PSDT too
	copy(buf[nvmeof.CommandSize:], in)
	s.q.sendSGE[0] = rdma.SGEOf(s.q.cmds, slot*s.q.capSize, nvmeof.CommandSize+len(in))
	s.q.sendWR[0] = rdma.SendWR{ID: 1 << 32, Op: rdma.OpSend, SGL: s.q.sendSGE[:]}
	if err := s.q.qp.PostSend(s.q.sendWR[:]); err != nil {
		return nvmeof.Completion{}, true
	}
	r, ok := s.q.poll(c.CID, 5*time.Second)
	for cid := range s.q.got {
		s.t.Fatalf("a completion for CID %#x while waiting for %#x", cid, c.CID)
	}
	if !ok {
		if s.q.qp.State() == rdma.StateError {
			return nvmeof.Completion{}, true
		}
		s.t.Fatalf("no completion for CID %#x (SQE %x)", c.CID, b)
	}
	return r.cqe, false
}
