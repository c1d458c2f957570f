package nsdevice

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/nbd"
)

// The host settings a bridge dials with (DialOptions). NBD connection i
// runs on I/O queue i modulo the queues granted.
//
// QueueDepth is deliberately below the queue depths NBD clients use
// (fio's and nbdcopy's 16 to 64): requests beyond it wait in the host's
// queue, and the host issues waiting requests from its completion loop,
// several capsules in one post. Submitted one by one from the NBD
// reader, every request would cost the transport its own post (on iwarp
// a writev). In BenchmarkBridge (4 KiB at QD32 over iwarp) the process
// spends about 10 µs of CPU per request at depth 8 against 16–18 µs at
// 16, 32 or 128. The target runs a queue's commands one after another,
// so a deeper queue gains nothing but waiting there.
//
// Buffers of MaxTransfer bytes carry data that does not fit a command
// slot: 32 of 256 KiB (lowered to the controller's MDTS) keep eight
// 1 MiB reads in flight on one queue.
const (
	Queues      = 4
	QueueDepth  = 8
	MaxTransfer = 256 << 10
	Buffers     = 32
)

// DialOptions are the host options of a bridge: Queues, QueueDepth,
// MaxTransfer and Buffers. Append the caller's own after them.
func DialOptions() []host.Option {
	return []host.Option{host.WithQueues(Queues), host.WithQueueDepth(QueueDepth),
		host.WithMaxTransfer(MaxTransfer), host.WithBuffers(Buffers)}
}

// Export describes ns as an NBD export named name. slots must be the
// Server's Slots (the most ops of one connection in flight).
func Export(ns *host.Namespace, name, description string, slots int) (nbd.Export, error) {
	info, err := ns.Controller().Info()
	if err != nil {
		return nbd.Export{}, err
	}
	if slots <= 0 {
		slots = nbd.DefaultSlots
	}
	oncs := info.Identify.ONCS
	dur := &durability{}
	dur.dirty.Store(noDirty)
	return nbd.Export{
		Name:        name,
		Description: description,
		Size:        ns.Size(),
		MinBlock:    uint32(ns.BlockSize()),
		Trim:        oncs&nvmeof.ONCSDatasetManagement != 0,
		WriteZeroes: oncs&nvmeof.ONCSWriteZeroes != 0,
		MultiConn:   true,
		Open: func(conn int) (nbd.Device, error) {
			return newDevice(ns, conn, slots, dur), nil
		},
	}, nil
}

// noDirty marks that no acknowledged write waits for a flush.
const noDirty = -1

// durability is shared by every connection of an export. A flush must
// not succeed when writes it covers may have been lost: a write the
// controller acknowledged into its volatile cache is gone if the
// controller is lost (a killed target) before a flush, and a flush
// resubmitted to the new association would cover nothing of it. So each
// acknowledged non-FUA write marks the export dirty with the connection
// epoch (the host's loss count) it completed in; a flush claims the
// marks present when it starts, and if the epoch moved on since the
// oldest of them, the flush is answered EIO. A failed flush puts its
// claim back.
type durability struct {
	// dirty is the oldest epoch with acknowledged writes no flush has
	// claimed, or noDirty.
	dirty atomic.Int64
}

// markDirty records an acknowledged write completed in epoch e.
func (d *durability) markDirty(e int64) {
	for {
		old := d.dirty.Load()
		if old != noDirty && old <= e {
			return
		}
		if d.dirty.CompareAndSwap(old, e) {
			return
		}
	}
}

// epoch is the controller's connection epoch: how many times it was lost.
func epoch(c *host.Controller) int64 { return int64(c.Stats().Losses) }

// device is one connection's view of the namespace.
type device struct {
	ns    *host.Namespace
	queue int
	zero  bool // the controller has Write Zeroes
	dur   *durability
	reqs  []host.Request
	ops   []*nbd.Op
	// claims holds, per slot, the dirty epoch a flush claimed.
	claims []int64
}

func newDevice(ns *host.Namespace, queue, slots int, dur *durability) *device {
	info, _ := ns.Controller().Info()
	d := &device{
		ns:     ns,
		queue:  queue,
		zero:   info.Identify.ONCS&nvmeof.ONCSWriteZeroes != 0,
		dur:    dur,
		reqs:   make([]host.Request, slots),
		ops:    make([]*nbd.Op, slots),
		claims: make([]int64, slots),
	}
	done := d.done
	for i := range d.reqs {
		d.reqs[i].Tag = uint64(i)
		d.reqs[i].Done = done
	}
	return d
}

// Submit maps op onto its slot's Request and starts it.
func (d *device) Submit(op *nbd.Op) {
	if op.Slot >= len(d.reqs) {
		op.Complete(fmt.Errorf("%w: op slot %d of %d", nbd.EINVAL, op.Slot, len(d.reqs)))
		return
	}
	r := &d.reqs[op.Slot]
	d.ops[op.Slot] = op
	r.Offset, r.Buf, r.Length, r.FUA = op.Offset, nil, 0, false
	switch op.Cmd {
	case nbd.CmdRead:
		r.Op, r.Buf = host.OpRead, op.Buf
	case nbd.CmdWrite:
		r.Op, r.Buf, r.FUA = host.OpWrite, op.Buf, op.FUA
	case nbd.CmdFlush:
		r.Op, r.Offset = host.OpFlush, 0
		d.claims[op.Slot] = d.dur.dirty.Swap(noDirty)
	case nbd.CmdWriteZeroes:
		r.Op, r.Length, r.FUA = host.OpWriteZeroes, op.Length, op.FUA
	case nbd.CmdTrim:
		r.Op, r.Length = host.OpDiscard, op.Length
		if op.FUA && d.zero {
			r.Op, r.FUA = host.OpWriteZeroes, true
		}
	default:
		op.Complete(fmt.Errorf("%w: %v", nbd.EINVAL, op.Cmd))
		return
	}
	if err := d.ns.SubmitOn(d.queue, r); err != nil {
		d.ops[op.Slot] = nil
		r.Buf = nil
		if r.Op == host.OpFlush && d.claims[op.Slot] != noDirty {
			d.dur.markDirty(d.claims[op.Slot])
		}
		op.Complete(errnoError(err))
	}
}

// done completes the op of a finished Request.
func (d *device) done(r *host.Request) {
	op := d.ops[r.Tag]
	d.ops[r.Tag] = nil
	r.Buf = nil
	switch r.Op {
	case host.OpFlush:
		claim := d.claims[r.Tag]
		if r.Err != nil {
			if claim != noDirty {
				d.dur.markDirty(claim)
			}
			break
		}
		if claim != noDirty && claim < epoch(d.ns.Controller()) {
			op.Complete(fmt.Errorf("%w: the connection to the controller was lost after writes this flush covers were acknowledged; they may be gone", nbd.EIO))
			return
		}
	case host.OpWrite, host.OpWriteZeroes, host.OpDiscard:
		if r.Err == nil && !r.FUA {
			d.dur.markDirty(epoch(d.ns.Controller()))
		}
	}
	if r.Err != nil {
		op.Complete(errnoError(r.Err))
		return
	}
	op.Complete(nil)
}

// Close has nothing to release: the controller is the bridge's.
func (d *device) Close() error { return nil }

// errnoError wraps err with the NBD error value that reports it.
func errnoError(err error) error {
	e := nbd.EIO
	switch {
	case errors.Is(err, host.ErrOutOfRange), errors.Is(err, host.ErrUnaligned),
		errors.Is(err, host.ErrInvalidRequest), errors.Is(err, host.ErrNotSupported):
		e = nbd.EINVAL
	case errors.Is(err, nvmeof.StatusLBAOutOfRange), errors.Is(err, nvmeof.StatusCapacityExceeded):
		e = nbd.ENOSPC
	}
	return fmt.Errorf("%w: %w", e, err)
}
