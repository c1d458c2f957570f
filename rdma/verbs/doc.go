// Package verbs is the hardware provider: rdma://host:port on InfiniBand,
// RoCE and iWARP NICs through libibverbs and librdmacm (rdma-core), with
// cgo. It registers the scheme "rdma" in every build.
//
// # Builds
//
// The real provider needs the build tag rdma and the development
// libraries (Debian: libibverbs-dev, librdmacm-dev):
//
//	go build -tags rdma ./...
//
// Without the tag (or without cgo) a stub registers instead, and every
// entry point returns ErrNotBuilt, which matches rdma.ErrNotSupported and
// says how to rebuild. With the tag but no device (no NIC, or no rdma_cm
// kernel module), OpenPD and Listen return ErrNoDevice, which matches
// rdma.ErrNotSupported as well.
//
// # The model
//
// Each API object is the verbs object of the same name: PD is ibv_pd, MR
// ibv_mr, CQ ibv_cq with its own completion channel, SRQ ibv_srq, QP an RC
// ibv_qp. The provider has one rdma_cm event channel for the process,
// created at first use; one goroutine takes its events and hands each to
// the object that owns the id (QP, Listener, ConnRequest).
//
//   - OpenPD(host) binds an rdma_cm id to host (a local address picks the
//     device that owns it) or resolves it (a remote address picks the
//     device that routes to it), takes that id's ibv_context and
//     allocates a PD. The id lives as long as the PD.
//   - CreateQP makes an id bound to the PD's local address and calls
//     rdma_create_qp on it, so librdmacm moves the QP to INIT. Connect
//     resolves the address and route on that id and connects it: the
//     connection manager moves the QP to RTR and RTS. On the passive side
//     the QP already exists when the request arrives on another id, so
//     Accept names the QP by number in rdma_accept and, on InfiniBand and
//     RoCE, moves it INIT→INIT→RTR→RTS with the attributes
//     rdma_init_qp_attr computes for the request's id, as librdmacm does
//     for a QP it owns. On iWARP the kernel does that inside the accept.
//   - PostSend and PostRecv copy a batch into C memory (a chain owned by
//     the queue: ibv_send_wr/ibv_recv_wr and ibv_sge arrays) and post it
//     with one cgo call. No Go pointer is stored in C memory; SGE
//     addresses are integers.
//   - The device sees its own wr_id: a sequence number of the QP's send or
//     receive ring (or a slot of an SRQ). Polling maps it back to the
//     caller's ID, and to the WR's opcode, which devices do not report
//     for error completions. A completion retires every earlier WR of its
//     ring, so unsignaled sends leave the ring with the next completion.
//   - CQ.Poll fills the caller's slice from ibv_poll_cq with one cgo call
//     per batch. Wait arms the CQ (ibv_req_notify_cq), polls once more,
//     then parks on the completion channel's descriptor in the Go poller:
//     no thread blocks in C, and ctx cancels the wait.
//   - QP.Err comes from what the provider sees first: an error completion
//     (its status), the device's async events (QP_ACCESS_ERR is
//     RemAccessErr, QP_REQ_ERR RemInvReqErr, QP_FATAL GeneralErr), or the
//     connection manager (DISCONNECTED, the peer closed: WRFlushErr;
//     DEVICE_REMOVAL or a connection error after establishment:
//     RetryExcErr).
//
// # Invariants
//
//   - A QP's send ring and receive ring each hold MaxSendWR/MaxRecvWR WRs
//     of the caller plus one: the device QP is created one WR larger, so
//     Close can always post its drain marker.
//   - Close moves the QP to ERR and posts a signaled drain marker on each
//     of its queues (none on the receive side with an SRQ). The device
//     completes the markers after every earlier WR, with WRFlushErr. The
//     CQ consumer's Poll swallows them; the second one destroys the QP and
//     its ids. CQ.Close and PD.Close destroy closed QPs whose markers
//     nobody polled.
//   - Memory registered with Register is kept reachable by the PD until
//     Deregister, so the garbage collector cannot reuse it while the
//     device may write it.
//
// # Concurrency
//
// PostSend holds the send ring's mutex across building and posting a
// batch, PostRecv the receive ring's; the two run in parallel. A CQ has
// one consumer at a time, as the API says; Poll holds the CQ's mutex.
// QP.life orders C calls on the QP's ids against its destruction; lock
// order is QP.life, then the send ring, then the receive ring.
//
// # Sharp edges
//
//   - Register hands the buffer's address to the kernel, which pins the
//     pages. The Go heap does not move objects, and a buffer passed
//     through an interface method escapes to the heap, so the address is
//     stable; the caller must still keep the slice and not reslice it to
//     grow. Alloc maps anonymous memory outside the Go heap: after
//     Deregister its Bytes are unmapped and touching them faults.
//   - Private data: at most 255 bytes (rdma_conn_param's length is a
//     uint8), and the transport may carry less: 56 bytes in an InfiniBand
//     REQ, 196 in a REP, 148 in a REJ. InfiniBand delivers private data
//     padded with zeros to those sizes, so a ConnRequest's PrivateData and
//     a RejectError's Private may be longer than what the peer sent.
//   - Reject with private data is a *rdma.RejectError at the peer; on
//     InfiniBand any consumer reject is (reason 28), and a missing
//     listener is rdma.ErrConnRefused.
//   - RNRRetry is capped at 6: the 3-bit value 7 means retry forever on
//     InfiniBand. RNRTimeout sets the QP's minimum RNR NAK timer on the
//     passive side, rounded up to the InfiniBand encoding; the active
//     side's QP is moved by librdmacm and keeps the kernel's default.
//   - Accept waits for ESTABLISHED (at most a minute) so the QP is in RTS
//     when it returns.
//   - A closed QP is destroyed only when its drain markers are polled, so
//     keep polling its CQs after Close, or close the CQs.
//   - A CQ overrun (IBV_EVENT_CQ_ERR) makes Poll return ErrCQOverrun for
//     good; the QPs on it fail with the device's own error completions.
//   - Connect through a device other than the PD's fails: the QP's id is
//     bound to the PD's local address.
//   - The device count is read once, when the provider is first used: a
//     device that appears later needs a new process.
//   - Nothing here can run on a machine without an RDMA device; the
//     package's tests check the translation tables, the chains and the
//     rings, and skip the device tests with a reason.
//
// # Library
//
// rdma-core's libibverbs and librdmacm, the user-space verbs and
// connection manager every Linux RDMA application uses. The C side is
// cverbs.h: small static helpers that build chains, copy events and
// completions into plain structs, and return errno values.
package verbs
