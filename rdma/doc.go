// Package rdma is capsule's verbs-shaped RDMA API: protection domains,
// memory regions with lkeys and rkeys, completion queues, reliable-connected
// queue pairs and a connection manager. Code above it (nvmeof, fs) uses it
// as it would use libibverbs and librdmacm, and runs unchanged on every
// provider.
//
// # Providers
//
// A provider is chosen by URL scheme:
//
//	iwarp://host:port  userspace iWARP over TCP (MPA/DDP/RDMAP), package rdma/iwarp
//	shm://name         same host, shared memory, package rdma/shm
//	rdma://host:port   real NICs through libibverbs/librdmacm, package rdma/verbs (build tag rdma)
//
// Providers register themselves; a program imports rdma/providers to link
// in all of them (nvmeof/host, and the fs client through it, link iwarp,
// shm and verbs themselves). With none linked in, an RDMA URL fails with
// ErrUnknownScheme and a message naming that import. Package rdma/fault
// wraps any provider with injected faults (fault+iwarp:// and so on); it
// is linked only where a test imports it, never by rdma/providers.
// Package rdma/conformance is the one test body every provider passes.
//
// # The model
//
//	pd, _ := rdma.OpenPD("iwarp://127.0.0.1:4420")
//	cq, _ := pd.CreateCQ(256)
//	mr, _ := pd.Alloc(1<<20, rdma.AccessAll)
//	qp, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
//	qp.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(mr, 0, 4096)}}})
//	reply, _ := qp.Connect(ctx, "127.0.0.1:4420", hello)
//
// The passive side Listens, takes a ConnRequest (with the peer's private
// data), creates and primes its own QP, and Accepts or Rejects.
//
// Semantics are those of an InfiniBand/iWARP reliable connection:
//   - Work requests on a QP execute in order. When a Send that follows a
//     Write completes at the peer, the Write's bytes are visible there; a
//     Read posted after a Write sees the Write's bytes.
//   - Write and Read are one-sided: the peer's provider places and serves
//     them against registered memory without the peer application.
//   - A bad rkey, a range outside the region, or a missing access right
//     moves the QP to StateError on both sides with QP.Err() RemAccessErr.
//     Nothing is read or written at the peer. A Read always completes with
//     RemAccessErr. A Write or Send does too on shm and on InfiniBand/RoCE,
//     whose Writes complete when acknowledged; on iWARP (hardware and the
//     iwarp provider alike) Sends and Writes complete once handed to the
//     transport, so the error arrives after, as a Terminate that moves the
//     QP to Error: the oldest WR still outstanding then completes with
//     RemAccessErr and the rest with WRFlushErr.
//   - A Send (or Write with Immediate) that finds no Recv posted waits
//     QPConfig.RNRRetry+1 times QPConfig.RNRTimeout for one; then both
//     sides move to StateError with QP.Err() RNRRetryExcErr, and the
//     sender's WR completes with RNRRetryExcErr unless, as on iWARP, it had
//     already completed.
//   - In StateError, and when the connection is lost, every outstanding WR
//     completes with WRFlushErr (or the error that caused it), so no
//     waiter hangs.
//   - Unsignaled send WRs complete silently on success; errors are always
//     reported. Completions of one QP arrive in posting order.
//
// The tricks of fast RDMA code are all expressible: batches of WRs per
// PostSend/PostRecv, several SGEs per WR, immediate data, inline data,
// selective signaling, CQ polling in batches (Poll fills a slice), and one
// QP (with its own CQ) per core.
//
// # Concurrency
//
// PD, MR, QP and SRQ methods are safe for concurrent use. A CQ has one
// consumer at a time (Poll/Wait), and any number of producers.
//
// # Errors
//
// Completion statuses are WCStatus values, which are errors; setup errors
// are the sentinels in errors.go; PostSend/PostRecv failures are
// *PostError; a refused connection is *RejectError carrying the peer's
// private data.
package rdma
