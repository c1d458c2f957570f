package target

import (
	"encoding/binary"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// NVM command set I/O commands: Read, Write, Flush, Write Zeroes, Dataset
// Management (NVM Command Set Specification 1.0, 3).

// namespaceOf finds the namespace a command names, and refuses the
// command when the namespace's ANA group is not usable through the
// controller's listener.
func namespaceOf(r *request) (*Namespace, nvmeof.Status) {
	ns := r.q.ctrl.sub.ns.Load().byID[r.cmd.NSID]
	if ns == nil {
		return nil, r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
	}
	r.ns = ns // counted, as every refusal of a command on a namespace
	if st := r.q.ctrl.ana.state(ns.anaGroup); !st.Usable() {
		// Not through this path (ana.go): a Path Related Status without
		// DNR, which tells the host to try another controller.
		return nil, r.fail(st.Status(), nvmeof.CommandOffsetNSID)
	}
	return ns, nvmeof.StatusSuccess
}

// prepareBlocks checks the namespace and LBA range of Read, Write and
// Write Zeroes, and for transfers the size against MDTS.
func prepareBlocks(r *request, dir nvmeof.DataDirection) nvmeof.Status {
	ns, st := namespaceOf(r)
	if !st.Success() {
		return st
	}
	slba, n := r.cmd.SLBA(), uint64(r.cmd.Blocks())
	if st := checkReservation(r, dir != nvmeof.ControllerToHost); !st.Success() {
		return st
	}
	if !ns.rangeOK(slba, n) {
		return r.fail(nvmeof.StatusLBAOutOfRange.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if dir == nvmeof.NoData {
		return nvmeof.StatusSuccess
	}
	bytes := n << ns.blockShift
	if bytes > uint64(r.q.maxTransfer()) {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW12)
	}
	r.dir, r.dataLen = dir, int(bytes)
	return nvmeof.StatusSuccess
}

func prepareRead(r *request) nvmeof.Status {
	return prepareBlocks(r, nvmeof.ControllerToHost)
}

func prepareWrite(r *request) nvmeof.Status {
	return prepareBlocks(r, nvmeof.HostToController)
}

func prepareWriteZeroes(r *request) nvmeof.Status {
	return prepareBlocks(r, nvmeof.NoData)
}

func executeRead(r *request) nvmeof.Status {
	ns := r.ns
	off := int64(r.cmd.SLBA() << ns.blockShift)
	if _, err := ns.dev.ReadAt(r.data[:r.dataLen], off); err != nil {
		r.q.t.logDeviceError(r, err)
		return deviceStatus(err, true)
	}
	ns.readCommands.Add(1)
	ns.bytesRead.Add(uint64(r.dataLen))
	return nvmeof.StatusSuccess
}

func executeWrite(r *request) nvmeof.Status {
	ns := r.ns
	off := int64(r.cmd.SLBA() << ns.blockShift)
	p := r.data[:r.dataLen]
	var err error
	if r.cmd.FUA() || !r.q.ctrl.wce.Load() {
		_, err = blockdev.WriteFUA(ns.dev, p, off)
	} else {
		_, err = ns.dev.WriteAt(p, off)
	}
	if err != nil {
		r.q.t.logDeviceError(r, err)
		return deviceStatus(err, false)
	}
	ns.writeCommands.Add(1)
	ns.bytesWritten.Add(uint64(r.dataLen))
	return nvmeof.StatusSuccess
}

func prepareFlush(r *request) nvmeof.Status {
	if r.cmd.NSID == nvmeof.NSIDAll {
		return nvmeof.StatusSuccess // VWC says broadcast Flush is supported
	}
	_, st := namespaceOf(r)
	return st
}

func executeFlush(r *request) nvmeof.Status {
	var err error
	if r.ns != nil {
		err = r.ns.dev.Sync()
	} else {
		err = r.q.ctrl.sub.flush()
	}
	if err != nil {
		r.q.t.logDeviceError(r, err)
		return deviceStatus(err, false)
	}
	return nvmeof.StatusSuccess
}

func executeWriteZeroes(r *request) nvmeof.Status {
	ns := r.ns
	off := int64(r.cmd.SLBA() << ns.blockShift)
	n := int64(r.cmd.Blocks()) << ns.blockShift
	var err error
	if r.cmd.DEAC() {
		err = blockdev.Deallocate(ns.dev, off, n)
	} else {
		err = blockdev.Zero(ns.dev, off, n)
	}
	if err == nil && (r.cmd.FUA() || !r.q.ctrl.wce.Load()) {
		err = ns.dev.Sync()
	}
	if err != nil {
		r.q.t.logDeviceError(r, err)
		return deviceStatus(err, false)
	}
	ns.writeCommands.Add(1)
	return nvmeof.StatusSuccess
}

func prepareDatasetManagement(r *request) nvmeof.Status {
	if _, st := namespaceOf(r); !st.Success() {
		return st
	}
	if st := checkReservation(r, true); !st.Success() {
		return st
	}
	r.dir, r.dataLen = nvmeof.HostToController, r.cmd.DSMRanges()*nvmeof.DSMRangeSize
	return nvmeof.StatusSuccess
}

// executeDatasetManagement deallocates the ranges when the command asks
// for it (AD); the integral read and write hints need nothing. Every
// range is checked before any is deallocated, so a command with one bad
// range changes nothing.
func executeDatasetManagement(r *request) nvmeof.Status {
	if r.cmd.DSMAttributes()&nvmeof.DSMDeallocate == 0 {
		return nvmeof.StatusSuccess
	}
	ns, nr := r.ns, r.cmd.DSMRanges()
	ranges := r.data[:nr*nvmeof.DSMRangeSize]
	for i := range nr {
		e := ranges[i*nvmeof.DSMRangeSize:]
		n := uint64(binary.LittleEndian.Uint32(e[nvmeof.DSMRangeOffsetLength:]))
		slba := binary.LittleEndian.Uint64(e[nvmeof.DSMRangeOffsetSLBA:])
		if n != 0 && !ns.rangeOK(slba, n) {
			return nvmeof.StatusLBAOutOfRange.WithDNR()
		}
	}
	for i := range nr {
		e := ranges[i*nvmeof.DSMRangeSize:]
		n := int64(binary.LittleEndian.Uint32(e[nvmeof.DSMRangeOffsetLength:]))
		slba := int64(binary.LittleEndian.Uint64(e[nvmeof.DSMRangeOffsetSLBA:]))
		if n == 0 {
			continue
		}
		if err := blockdev.Deallocate(ns.dev, slba<<ns.blockShift, n<<ns.blockShift); err != nil {
			r.q.t.logDeviceError(r, err)
			return deviceStatus(err, false)
		}
	}
	return nvmeof.StatusSuccess
}
