package host

import (
	"context"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Reservations (NVMe Base 2.x 8.19) of a namespace, for hosts that fence
// each other through it (clusters). The host is the controller's host
// identifier (WithHostID): every controller of this host shares its
// registration. Each method sends one command and waits for it; a
// command in flight when the connection is lost is not sent again
// (reservation commands are not idempotent: it fails with
// ErrControllerLost, and the caller reads the state back with
// ReservationReport). A refusal is a *CommandError: Reservation Conflict
// (nvmeof.StatusReservationConflict) for a wrong key or another holder.
// Reads and writes the reservation does not allow fail with Reservation
// Conflict too.

// ReservationRegister registers the host with key nrkey (action
// nvmeof.ReservationRegister), unregisters it (ReservationUnregister,
// crkey its key) or replaces its key with nrkey (ReservationReplace).
// iekey ignores crkey. cptpl turns Persist Through Power Loss on
// (nvmeof.CPTPLSet: the namespace's reservations survive a restart of
// the target, where its RESCAP claims it) or off (CPTPLClear), or leaves
// it (CPTPLNoChange).
func (n *Namespace) ReservationRegister(ctx context.Context, action uint8, iekey bool, cptpl uint8, crkey, nrkey uint64) error {
	return n.reservation(ctx, nvmeof.IOReservationRegister, action, iekey, 0, cptpl, crkey, nrkey)
}

// ReservationAcquire acquires a reservation of type t (action
// nvmeof.ReservationAcquire), or preempts the registrants whose key is
// prkey and takes the reservation from them (ReservationPreempt,
// ReservationPreemptAndAbort). crkey is the host's key.
func (n *Namespace) ReservationAcquire(ctx context.Context, action uint8, t nvmeof.ReservationType, crkey, prkey uint64) error {
	return n.reservation(ctx, nvmeof.IOReservationAcquire, action, false, t, 0, crkey, prkey)
}

// ReservationRelease releases the host's reservation of type t (action
// nvmeof.ReservationRelease) or clears every registration and the
// reservation (ReservationClear). crkey is the host's key.
func (n *Namespace) ReservationRelease(ctx context.Context, action uint8, t nvmeof.ReservationType, crkey uint64) error {
	return n.reservation(ctx, nvmeof.IOReservationRelease, action, false, t, 0, crkey, 0)
}

// ReservationReport returns the namespace's reservation status: its
// generation, type and registrants (the extended structure, with 128-bit
// host identifiers).
func (n *Namespace) ReservationReport(ctx context.Context) (*nvmeof.ReservationStatus, error) {
	size := 4096
	for {
		p := &Passthru{Cmd: nvmeof.Command{Opcode: nvmeof.IOReservationReport, NSID: n.nsid, CDW10: uint32(size/4 - 1), CDW11: 1},
			Data: make([]byte, size), Idempotent: true}
		if err := n.c.exec(ctx, p); err != nil {
			return nil, err
		}
		b := p.Data[:p.N]
		if len(b) < nvmeof.ResStatusHeaderSize {
			return nil, fmt.Errorf("%w: a reservation report of %d bytes", ErrProtocol, len(b))
		}
		regs := int(b[nvmeof.ResStatusOffsetREGSTS]) | int(b[nvmeof.ResStatusOffsetREGSTS+1])<<8
		whole := nvmeof.ResStatusHeaderSize + regs*nvmeof.ResStatusEntrySize
		if whole > len(b) {
			if info, err := n.c.Info(); err == nil && whole <= info.MaxTransfer && size < whole {
				size = whole
				continue // more registrants than the buffer held: ask again
			}
			return nil, fmt.Errorf("%w: %d registrants, more than one command carries", ErrNotSupported, regs)
		}
		var st nvmeof.ReservationStatus
		if err := st.UnmarshalBinary(b[:whole]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		return &st, nil
	}
}

func (n *Namespace) reservation(ctx context.Context, op nvmeof.Opcode, action uint8, iekey bool, t nvmeof.ReservationType, cptpl uint8, crkey, other uint64) error {
	k := nvmeof.ReservationKeys{Current: crkey, Other: other}
	data, _ := k.MarshalBinary()
	if op == nvmeof.IOReservationRelease {
		data = data[:nvmeof.ReservationReleaseDataSize]
	}
	p := &Passthru{Cmd: nvmeof.Command{Opcode: op, NSID: n.nsid}, Data: data}
	p.Cmd.SetReservation(action, iekey, t, cptpl)
	return n.c.exec(ctx, p)
}
