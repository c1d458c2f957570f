package host

import (
	"context"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Passthru is one vendor-specific I/O command (opcode 80h to FFh) sent as
// the caller built it, for command sets the host does not know (the file
// service of package fs). The data direction is the opcode's bits 1:0, as
// NVMe defines them:
//
//	00b  no data
//	01b  host to controller: Data is sent, in the capsule when it fits
//	     the in-capsule size, else from a registered buffer behind a keyed
//	     SGL (the controller RDMA-Reads it)
//	10b  controller to host: the controller fills Data through a keyed
//	     SGL (RDMA Write into a registered buffer), copied out on completion
//	11b  bidirectional: Payload travels as in-capsule data at offset 0,
//	     not described by SGL1, and the controller fills Data as for 10b
//
// A Passthru is the caller's; it may be reused once Exec has returned.
type Passthru struct {
	// Cmd is the command. The host sets CID, PSDT and DPTR; Opcode,
	// NSID, CDW2, CDW3 and CDW10 to CDW15 are sent as given.
	Cmd nvmeof.Command
	// Payload is the in-capsule data of a bidirectional command (11b),
	// at most InCapsule bytes (Info); nil for other directions.
	Payload []byte
	// Data is the data of the command: sent (01b) or filled (10b, 11b).
	// At most MaxTransfer bytes (Info): one command, never split. Data
	// in memory of AllocBuffer moves without a copy, unless it is sent
	// in the capsule.
	Data []byte
	// ReplyLenInDW1: the controller reports in the completion's DW1 how
	// many bytes of Data it wrote; only those are copied out (a larger
	// value is a protocol error of the command: ErrProtocol).
	ReplyLenInDW1 bool
	// Idempotent says that running the command twice leaves the same
	// state as running it once. A command in flight when the connection
	// is lost is sent again after the reconnect only if it is idempotent;
	// otherwise it fails with ErrControllerLost, since it may or may not
	// have run. A command not yet sent waits for the reconnect either way.
	Idempotent bool

	// CQE is the completion, set when Exec returns nil or a
	// *CommandError.
	CQE nvmeof.Completion
	// N is the number of bytes of Data filled (10b, 11b).
	N int

	req Request
}

// Exec sends p on an I/O queue (round robin) and waits for its
// completion. It returns nil when the command completed with a success
// status, a *CommandError carrying any other status, or an error wrapping
// ErrControllerLost or ErrClosed; ErrInvalidRequest when p does not fit
// one command.
//
// ctx bounds the wait before the command is handed to a queue; once
// submitted, Exec returns when the command completes or fails, which the
// keep-alive, I/O and controller-loss timeouts bound (WithKeepAlive,
// WithIOTimeout, WithCtrlLossTimeout): a command waiting for a reconnect
// fails when the host gives up.
func (c *Controller) Exec(ctx context.Context, p *Passthru) error {
	if p.Cmd.Opcode < 0x80 {
		return fmt.Errorf("%w: opcode %02Xh is not vendor specific", ErrInvalidRequest, uint8(p.Cmd.Opcode))
	}
	return c.exec(ctx, p)
}

// exec is Exec for any I/O opcode whose bits 1:0 give its data direction
// (the vendor-specific ones, and the reservation commands of
// reservation.go).
func (c *Controller) exec(ctx context.Context, p *Passthru) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.discovery {
		return fmt.Errorf("%w: a discovery controller has no I/O queues", ErrNotSupported)
	}
	if err := c.checkPassthru(p); err != nil {
		return err
	}
	r := &p.req
	if !r.state.CompareAndSwap(reqIdle, reqBusy) {
		return ErrRequestBusy
	}
	r.Op, r.ns, r.ctrl, r.raw, r.pt, r.Done = opPassthru, nil, c, nil, p, nil
	r.reset(0, 1)
	r.queue = int(c.rr.Add(1))
	p.CQE, p.N = nvmeof.Completion{}, 0
	if err := c.start(r); err != nil {
		r.state.Store(reqIdle)
		return err
	}
	err := r.Wait()
	if err == nil && p.ReplyLenInDW1 && int(p.CQE.DW1) > len(p.Data) {
		return fmt.Errorf("%w: opcode %02Xh: the controller reports %d bytes of reply data in a %d-byte buffer",
			ErrProtocol, uint8(p.Cmd.Opcode), p.CQE.DW1, len(p.Data))
	}
	return err
}

// checkPassthru refuses what one command cannot carry.
func (c *Controller) checkPassthru(p *Passthru) error {
	a, err := c.liveAssociation()
	maxTransfer, icd := DefaultMaxTransfer, 0
	if err == nil {
		maxTransfer, icd = a.maxTransfer, a.icd
	}
	dir := p.Cmd.Opcode.Direction()
	switch {
	case dir == nvmeof.NoData && len(p.Data) > 0:
		return fmt.Errorf("%w: opcode %02Xh moves no data, but Data has %d bytes", ErrInvalidRequest, uint8(p.Cmd.Opcode), len(p.Data))
	case dir != nvmeof.Bidirectional && len(p.Payload) > 0:
		return fmt.Errorf("%w: opcode %02Xh is not bidirectional, but Payload has %d bytes", ErrInvalidRequest, uint8(p.Cmd.Opcode), len(p.Payload))
	case len(p.Data) > maxTransfer:
		return fmt.Errorf("%w: %d bytes of data, more than one command carries (%d)", ErrInvalidRequest, len(p.Data), maxTransfer)
	case len(p.Payload) > 0 && err == nil && len(p.Payload) > icd:
		return fmt.Errorf("%w: %d bytes of payload, more than the capsule carries (%d)", ErrInvalidRequest, len(p.Payload), icd)
	}
	return nil
}

// passthruNeedsBuffer reports whether the command of r needs one of the
// queue's large buffers: its data does not fit the slot's area after the
// payload.
func (q *queue) passthruNeedsBuffer(r *Request) bool {
	p := r.pt
	if len(p.Data) == 0 {
		return false
	}
	if p.Cmd.Opcode.Direction() == nvmeof.HostToController && len(p.Data) <= q.cfg.icd {
		return false
	}
	return passthruDataOffset(p)+len(p.Data) > q.cfg.area
}

// passthruDataOffset is where, in a slot's area, the data of a command
// that does not use a large buffer starts: after the payload, on a
// 64-byte boundary.
func passthruDataOffset(p *Passthru) int { return (len(p.Payload) + 63) &^ 63 }

// issuePassthru fills in cmd and the slot's capsule for a passthrough
// command and returns the capsule length.
func (q *queue) issuePassthru(s *slot, cmd *nvmeof.Command) int {
	p := s.req.pt
	*cmd = p.Cmd
	capLen := nvmeof.CommandSize
	area := s.capsule[nvmeof.CommandSize:]
	if len(p.Payload) > 0 {
		copy(area, p.Payload)
		capLen += len(p.Payload)
	}
	cmd.DPTR = q.tr.nullSGL()
	if len(p.Data) == 0 {
		return capLen
	}
	if s.direct != nil {
		// The caller's registered memory: no copy either way.
		s.xfer, s.inPlace = s.direct, p.Cmd.Opcode.Direction()&nvmeof.ControllerToHost != 0
		cmd.DPTR = q.tr.directSGL(s)
		return capLen
	}
	n := int64(len(p.Data))
	if p.Cmd.Opcode.Direction() == nvmeof.HostToController {
		if s.buf < 0 && len(p.Data) <= q.cfg.icd {
			copy(area, p.Data)
			cmd.DPTR = nvmeof.InCapsuleSGL{Length: uint32(n)}.Descriptor()
			return capLen + len(p.Data)
		}
		copy(q.passthruData(s), p.Data)
	}
	off := 0
	if s.buf < 0 {
		off = passthruDataOffset(p)
	}
	cmd.DPTR = q.dataSGL(s, off, n) // at most MaxTransfer bytes
	return capLen
}

// passthruData is the registered memory a passthrough command's data
// moves through.
func (q *queue) passthruData(s *slot) []byte {
	p := s.req.pt
	if s.buf >= 0 {
		return q.data(s)[:len(p.Data)]
	}
	o := passthruDataOffset(p)
	return q.data(s)[o : o+len(p.Data)]
}

// completePassthru keeps a passthrough command's completion and, when it
// succeeded, copies its reply data out.
func (q *queue) completePassthru(s *slot) {
	p := s.req.pt
	p.CQE = s.cqe
	if !s.cqe.Status.Success() || p.Cmd.Opcode.Direction()&nvmeof.ControllerToHost == 0 || len(p.Data) == 0 {
		return
	}
	n := len(p.Data)
	if p.ReplyLenInDW1 {
		n = min(n, int(s.cqe.DW1))
	}
	if s.direct != nil {
		p.N = n // already there
		return
	}
	p.N = copy(p.Data[:n], q.passthruData(s))
}

// passthruDirect returns the Data of r's passthrough command when it may
// move without a copy, should it lie in memory of AllocBuffer: data that
// is not sent in the capsule.
func (q *queue) passthruDirect(r *Request) []byte {
	p := r.pt
	if len(p.Data) == 0 || p.Cmd.Opcode.Direction() == nvmeof.HostToController && len(p.Data) <= q.cfg.icd {
		return nil
	}
	return p.Data
}
