package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// fabricsConnect sends the queue's Fabrics Connect command and returns the
// controller ID the controller answered with. The 1024 bytes of Connect
// data go behind a keyed SGL on an RDMA admin queue (as Linux hosts send
// them), in the capsule on a TCP admin queue (likewise), and in the
// capsule on I/O queues when the controller takes in-capsule data.
func (q *queue) fabricsConnect(ctx context.Context, subNQN string, cntlid uint16, kato uint32) (uint16, error) {
	c := q.ctrl
	cmd := (&nvmeof.Connect{QID: q.qid, SQSize: uint16(q.cfg.entries - 1), KATO: kato}).Command()
	cd := nvmeof.ConnectData{HostID: c.cfg.hostID, CNTLID: cntlid, SubNQN: subNQN, HostNQN: c.cfg.hostNQN}
	data := make([]byte, nvmeof.ConnectDataSize)
	if _, err := cd.MarshalTo(data); err != nil {
		return 0, err
	}
	cqe, err := q.exec(ctx, cmd, data, nvmeof.HostToController, q.qid != 0 || c.tcp)
	if err != nil {
		var ce *CommandError
		if errors.As(err, &ce) {
			e := &ConnectError{QID: q.qid, SubNQN: subNQN, HostNQN: c.cfg.hostNQN, Status: ce.Status}
			if errors.Is(ce.Status, nvmeof.StatusConnectInvalidParameters) {
				e.Param = nvmeof.ParseInvalidParameter(cqe.DW0)
			}
			return 0, e
		}
		return 0, fmt.Errorf("nvmeof/host: Connect of queue %d: %w", q.qid, err)
	}
	resp := nvmeof.ParseConnectResponse(cqe.DW0)
	if resp.AuthReq != 0 {
		return 0, fmt.Errorf("%w: queue %d: the controller requires in-band authentication (AUTHREQ %#x)", ErrNotSupported, q.qid, uint16(resp.AuthReq))
	}
	return resp.CNTLID, nil
}

// propertyGet reads a controller property.
func (q *queue) propertyGet(ctx context.Context, off uint32) (uint64, error) {
	size, ok := nvmeof.PropertySizeAt(off)
	if !ok {
		return 0, fmt.Errorf("nvmeof/host: no property at %#x", off)
	}
	pg := nvmeof.PropertyGet{Size: size, Offset: off}
	cqe, err := q.exec(ctx, pg.Command(), nil, nvmeof.NoData, false)
	if err != nil {
		return 0, fmt.Errorf("nvmeof/host: Property Get %#x: %w", off, err)
	}
	v := cqe.Value64()
	if size == nvmeof.PropertySize4 {
		v &= 0xffffffff
	}
	return v, nil
}

// propertySet writes a 4-byte controller property.
func (q *queue) propertySet(ctx context.Context, off uint32, v uint32) error {
	ps := nvmeof.PropertySet{Size: nvmeof.PropertySize4, Offset: off, Value: uint64(v)}
	if _, err := q.exec(ctx, ps.Command(), nil, nvmeof.NoData, false); err != nil {
		return fmt.Errorf("nvmeof/host: Property Set %#x: %w", off, err)
	}
	return nil
}

// identify runs Identify with cns for nsid into the 4096 bytes of buf.
func (q *queue) identify(ctx context.Context, cns nvmeof.CNS, nsid uint32, buf []byte) error {
	var cmd nvmeof.Command
	cmd.Opcode = nvmeof.AdminIdentify
	cmd.NSID = nsid
	cmd.SetIdentify(cns, 0)
	if _, err := q.exec(ctx, cmd, buf, nvmeof.ControllerToHost, false); err != nil {
		return fmt.Errorf("nvmeof/host: Identify CNS %02Xh nsid %d: %w", uint8(cns), nsid, err)
	}
	return nil
}

// setFeatures runs Set Features and returns DW0 of the completion.
func (q *queue) setFeatures(ctx context.Context, fid nvmeof.FeatureID, value uint32) (uint32, error) {
	var cmd nvmeof.Command
	cmd.Opcode = nvmeof.AdminSetFeatures
	cmd.SetFeature(fid, value)
	cqe, err := q.exec(ctx, cmd, nil, nvmeof.NoData, false)
	if err != nil {
		return 0, fmt.Errorf("nvmeof/host: Set Features %02Xh: %w", uint8(fid), err)
	}
	return cqe.DW0, nil
}

// getLogPage reads len(buf) bytes of log page lid from offset, in
// commands of at most maxTransfer bytes.
func (q *queue) getLogPage(ctx context.Context, lid nvmeof.LogPageID, offset uint64, buf []byte, maxTransfer int) error {
	for done := 0; done < len(buf); {
		n := min(len(buf)-done, maxTransfer)
		var cmd nvmeof.Command
		cmd.Opcode = nvmeof.AdminGetLogPage
		if err := cmd.SetGetLogPage(lid, offset+uint64(done), uint64(n)); err != nil {
			return err
		}
		if _, err := q.exec(ctx, cmd, buf[done:done+n], nvmeof.ControllerToHost, false); err != nil {
			return fmt.Errorf("nvmeof/host: Get Log Page %02Xh at %d: %w", uint8(lid), offset+uint64(done), err)
		}
		done += n
	}
	return nil
}

// enable runs the property handshake of a fresh controller: CC with EN,
// the command set, memory page size and queue entry sizes, then waits for
// CSTS.RDY for as long as CAP.TO allows.
func (q *queue) enable(ctx context.Context, cap nvmeof.CAP) error {
	css := nvmeof.CCCSSNVM
	switch {
	case cap.CSS()&nvmeof.CAPCSSNoIO != 0 && cap.CSS()&(nvmeof.CAPCSSNVM|nvmeof.CAPCSSIOCommandSets) == 0:
		css = nvmeof.CCCSSAdminOnly
	case cap.CSS()&nvmeof.CAPCSSIOCommandSets != 0:
		css = nvmeof.CCCSSAllIO
	}
	cc := nvmeof.CC(0).
		WithCSS(css).
		WithMPS(pageShift(cap) - 12).
		WithAMS(0).
		WithSHN(nvmeof.ShutdownNone).
		WithIOSQES(6).
		WithIOCQES(4).
		WithEN(true)
	if err := q.propertySet(ctx, nvmeof.PropertyCC, uint32(cc)); err != nil {
		return err
	}
	return q.waitStatus(ctx, time.Duration(int(cap.TO())+1)*500*time.Millisecond, "RDY", func(s nvmeof.CSTS) bool { return s.RDY() })
}

// shutdown asks for a normal shutdown and waits for it to complete.
func (q *queue) shutdown(ctx context.Context, wait time.Duration) error {
	v, err := q.propertyGet(ctx, nvmeof.PropertyCC)
	if err != nil {
		return err
	}
	cc := nvmeof.CC(v).WithSHN(nvmeof.ShutdownNormal)
	if err := q.propertySet(ctx, nvmeof.PropertyCC, uint32(cc)); err != nil {
		return err
	}
	return q.waitStatus(ctx, wait, "SHST", func(s nvmeof.CSTS) bool { return s.SHST() == nvmeof.ShutdownStatusComplete })
}

// waitStatus polls CSTS until ok holds, CSTS.CFS is set, or limit passes.
func (q *queue) waitStatus(ctx context.Context, limit time.Duration, what string, ok func(nvmeof.CSTS) bool) error {
	deadline := time.Now().Add(limit)
	pause := 50 * time.Microsecond
	for {
		v, err := q.propertyGet(ctx, nvmeof.PropertyCSTS)
		if err != nil {
			return err
		}
		s := nvmeof.CSTS(v)
		if s.CFS() {
			return &ControllerCheckError{Field: "CSTS", Problem: fmt.Sprintf("controller fatal status (%v)", s)}
		}
		if ok(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return &ControllerCheckError{Field: "CSTS." + what, Problem: fmt.Sprintf("not set after %v (%v)", limit, s)}
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// pageShift is the memory page size the host uses: 4 KiB, or the
// controller's minimum if that is larger.
func pageShift(cap nvmeof.CAP) uint8 {
	return 12 + cap.MPSMIN()
}

// checkController makes the checks a Linux host makes of Identify
// Controller before it uses a fabrics controller.
func checkController(id *nvmeof.IdentifyController, cntlid uint16, discovery, keyed bool) error {
	switch {
	case id.CNTLID != cntlid:
		return &ControllerCheckError{Field: "CNTLID", Problem: fmt.Sprintf("Identify says %#04x, Connect returned %#04x", id.CNTLID, cntlid)}
	case !discovery && id.KAS == 0:
		return &ControllerCheckError{Field: "KAS", Problem: "0: keep-alive support is mandatory for fabrics I/O controllers"}
	case !discovery && id.IOCCSZ < 4:
		return &ControllerCheckError{Field: "IOCCSZ", Problem: fmt.Sprintf("%d, below 4 (a 64-byte command)", id.IOCCSZ)}
	case !discovery && id.IORCSZ < 1:
		return &ControllerCheckError{Field: "IORCSZ", Problem: fmt.Sprintf("%d, below 1 (a 16-byte response)", id.IORCSZ)}
	case id.MAXCMD == 0:
		return &ControllerCheckError{Field: "MAXCMD", Problem: "0: maximum outstanding commands not set"}
	case !keyed && id.SGLS&(nvmeof.SGLSSupported|nvmeof.SGLSSupportedDwordAligned) == 0:
		return &ControllerCheckError{Field: "SGLS", Problem: fmt.Sprintf("%#x: SGLs not supported, and NVMe over Fabrics needs them", id.SGLS)}
	case keyed && id.SGLS&nvmeof.SGLSKeyedDataBlock == 0:
		return &ControllerCheckError{Field: "SGLS", Problem: fmt.Sprintf("%#x: keyed SGL data blocks (bit 2) not supported, and the RDMA binding needs them", id.SGLS)}
	case id.ICDOFF != 0:
		return &ControllerCheckError{Field: "ICDOFF", Problem: fmt.Sprintf("%d: in-capsule data must start right after the SQE", id.ICDOFF)}
	}
	return nil
}
