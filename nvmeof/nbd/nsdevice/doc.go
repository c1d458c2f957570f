// Package nsdevice serves an NVMe-oF namespace, through the host library
// (nvmeof/host), as an NBD export of package nbd: the bridge of
// `mount --nbd`.
//
// Each NBD connection opens its own Device, which runs its requests on
// one I/O queue of the controller (Namespace.SubmitOn with the
// connection's number), so that fio's or nbdcopy's several connections
// spread over several queues, each with its own completion goroutine.
// Every op maps to one host.Request, kept per op slot and reused, with
// one Done callback for all: steady-state I/O allocates nothing here.
//
//	NBD_CMD_READ          OpRead (FUA ignored: reads are of what is stored)
//	NBD_CMD_WRITE         OpWrite, FUA as asked
//	NBD_CMD_FLUSH         OpFlush
//	NBD_CMD_WRITE_ZEROES  OpWriteZeroes, FUA as asked
//	NBD_CMD_TRIM          OpDiscard; with FUA, OpWriteZeroes with FUA, so
//	                      the blocks are durably in a known state
//
// The export's minimum block is the namespace's block size; TRIM and
// WRITE_ZEROES are offered when the controller's ONCS has Dataset
// Management and Write Zeroes. CAN_MULTI_CONN is offered: every
// connection goes to the same controller, whose write cache is the
// namespace's, so a flush on one connection covers what the others had
// answered.
//
// Errors: a refused request (out of range, unaligned, unsupported) is
// EINVAL, an NVMe LBA Out of Range or Capacity Exceeded is ENOSPC, and
// everything else (a media error, the controller lost past the
// reconnect timeout) is EIO. A request waits while the host reconnects;
// it is answered when the host resubmits it after the reconnect, or
// fails when the host gives up.
package nsdevice
