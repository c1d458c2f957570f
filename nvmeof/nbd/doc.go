// Package nbd is a server of the Network Block Device protocol
// (doc/proto.md of the NBD project): the fixed newstyle handshake and the
// transmission phase, over any net.Conn. It serves Exports whose data a
// Device provides; cmd/mount uses it to export an NVMe-oF namespace so
// that fio's nbd engine, qemu, nbdcopy and nbdinfo drive capsule.
//
// # The handshake
//
// The server greets with NBDMAGIC, IHAVEOPT and the flags FIXED_NEWSTYLE
// and NO_ZEROES; a client that sets any other flag is disconnected. It
// then answers options one at a time:
//
//   - NBD_OPT_GO and NBD_OPT_INFO: NBD_INFO_EXPORT (size and transmission
//     flags) and NBD_INFO_BLOCK_SIZE (always, since the minimum block is
//     the device's), NBD_INFO_NAME and NBD_INFO_DESCRIPTION when asked,
//     then ACK; GO enters transmission. An unknown export is
//     NBD_REP_ERR_UNKNOWN, malformed data NBD_REP_ERR_INVALID.
//   - NBD_OPT_EXPORT_NAME: size, flags (and the 124 zeroes unless
//     NO_ZEROES), then transmission; an unknown name ends the session,
//     as the protocol requires.
//   - NBD_OPT_LIST: one NBD_REP_SERVER per export (name, description).
//   - NBD_OPT_STRUCTURED_REPLY: reads are then answered with structured
//     replies (below).
//   - NBD_OPT_ABORT: ACK, and the session ends.
//   - anything else: NBD_REP_ERR_UNSUP; option data over 64 KiB:
//     NBD_REP_ERR_TOO_BIG (over 1 MiB the connection is dropped).
//
// The empty export name selects the first export. The handshake must end
// within Server.HandshakeTimeout.
//
// # Transmission
//
// Commands: READ, WRITE (FUA), FLUSH, TRIM and WRITE_ZEROES (NO_HOLE)
// when the export supports them, and DISC. The transmission flags are
// HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM and SEND_WRITE_ZEROES as the
// export says, CAN_MULTI_CONN when its device is shared by every
// connection (one cache, so a flush on one connection covers writes
// answered on another), and SEND_DF with structured replies.
//
// Each connection has two goroutines: the reader decodes a request,
// checks it, reads a write's payload into a pooled buffer and submits it
// to the Device; the writer sends each reply as the Device completes the
// op, so replies leave in completion order, matched by cookie, and many
// requests (Server.Slots, 128 by default) are in flight per connection.
// The writer flushes its buffer whenever no other completion waits, so
// bursts of small replies share a write system call.
//
// The rules the server keeps:
//
//   - Every request except DISC gets exactly one reply, with its own
//     error: a Device error wrapping an Errno is sent as that value, any
//     other error as EIO.
//   - No reply is sent before the Device completes the op: a write's
//     reply means the device has the data, a FUA write's or a flush's
//     that it is durable (the Device's promise, see Op).
//   - A request is checked before anything is done with it: the command
//     and its flags, a flush's zero range, the range against the export
//     size without overflow (EINVAL; ENOSPC for writes and write-zeroes),
//     alignment to the minimum block size (EINVAL), and a read's or
//     write's length against the maximum payload (EINVAL). A refused
//     write's payload is read and discarded. None of these ends the
//     session.
//   - Only a request with a wrong magic ends the session (the stream is
//     out of step), besides DISC and the client closing.
//   - At DISC, at the end of the stream and at Shutdown, the ops in
//     flight finish and are answered before the connection closes.
//
// With structured replies, a read is answered with one OFFSET_DATA chunk
// flagged DONE (so DF is always honoured), a failed read with one ERROR
// chunk carrying the error's text, a zero-length read with a NONE chunk;
// other commands get simple replies, as the protocol allows.
//
// # Allocation
//
// Ops are allocated once per connection (Slots of them) and reused; data
// buffers come from pools by power-of-two size, and the bytes held by one
// connection's requests in flight are bounded by Server.InFlightBytes.
// In steady state the server allocates nothing per request.
//
// # Concurrency
//
// Server methods are safe for concurrent use. Device.Submit is called by
// one goroutine per connection; Op.Complete may be called from any
// goroutine and never blocks. conn.mu guards the in-flight byte count
// only, and is never held while calling the Device.
//
// # Sharp edges
//
//   - No TLS (NBD_OPT_STARTTLS is NBD_REP_ERR_UNSUP), no metadata
//     contexts or block status, no NBD_CMD_CACHE, no read-only exports.
//   - A client that sends a DISC while requests are in flight gets their
//     replies before the connection closes; one that simply closes loses
//     them (the ops still complete on the device).
//
// # Where it lives
//
// The package is a protocol of its own: it knows nothing of NVMe-oF,
// uses only the standard library, and serves its own asynchronous
// Device (Submit and Op.Complete), not a blockdev.Device, so any program
// that wants to export a block device over NBD can import it. It sits
// under nvmeof, the block service's tree, because what capsule exports
// through it is a block namespace, and the project keeps its top level
// to the packages of its design (rdma, nvmeof, chunkstore, fs); not under
// nvmeof/blockdev, whose packages are block devices. Subpackage nsdevice
// is the one bridge to NVMe-oF: it serves a namespace of the Go host
// library (nvmeof/host) as an NBD Device.
//
// # Library
//
// Only the standard library. The wire layout follows doc/proto.md; field
// offsets are named in wire.go and tested as annotated hex.
package nbd
