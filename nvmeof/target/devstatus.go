package target

import (
	"errors"
	"syscall"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// deviceStatus is the status of a command whose namespace device failed
// it with err. In order:
//
//   - a Status the error carries (errors.As): the device knows what went
//     wrong better than any guess here (an erasure-coded volume says
//     Unrecovered Read Error when too many shards are lost, Capacity
//     Exceeded when a device is full);
//   - ENOSPC: Capacity Exceeded, with DNR: nothing was written;
//   - blockdev.ErrOutOfRange: LBA Out of Range, with DNR (the namespace
//     checks ranges first, so only a device that shrank says this);
//   - blockdev.ErrClosed: Namespace Not Ready (the target is shutting
//     down);
//   - anything else: Unrecovered Read Error for a command that reads the
//     device, Write Fault for one that writes or flushes it.
//
// A status that the device gives as success is not trusted: the command
// failed, so it gets the fallback.
func deviceStatus(err error, reads bool) nvmeof.Status {
	var st nvmeof.Status
	switch {
	case errors.As(err, &st) && !st.Success():
		return st
	case errors.Is(err, syscall.ENOSPC):
		return nvmeof.StatusCapacityExceeded.WithDNR()
	case errors.Is(err, blockdev.ErrOutOfRange):
		return nvmeof.StatusLBAOutOfRange.WithDNR()
	case errors.Is(err, blockdev.ErrClosed):
		return nvmeof.StatusNamespaceNotReady
	case reads:
		return nvmeof.StatusUnrecoveredReadError
	}
	return nvmeof.StatusWriteFault
}
