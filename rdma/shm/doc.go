// Package shm is the shared-memory RDMA provider, scheme "shm": queue
// pairs between processes of one host (or within one process) whose
// Writes and Reads are a single memory copy made by the initiator.
//
//	import _ "github.com/capsule-storage/capsule/rdma/shm"
//	l, _ := rdma.Listen(ctx, "shm://capsule")          // target
//	pd, _ := rdma.OpenPD("shm://capsule")               // host; the name is not used by OpenPD
//	qp, reply, _ := rdma.Dial(ctx, "shm://capsule", pd, cfg, hello)
//
// # Trust model
//
// Both ends are trusted processes of the same host, as the two halves of
// one program would be. A peer maps the regions it accesses read-write
// and could bypass every check below; the checks keep honest peers
// correct (a stale rkey fails instead of corrupting memory) and a broken
// peer from crashing this process, not a hostile one out of its memory.
// What a peer writes into shared memory (ring entries, indexes, key-table
// entries, control messages) is validated before use: a bad value errors
// that QP (RemInvReqErr), never another QP, and never reads or writes
// outside a mapping.
//
// # Model
//
// A PD owns a key table, a memfd (KeyTableCapacity entries of 32 bytes,
// keytable.go) that peers map read-only. Entry i describes the region
// whose key has index i: key, access rights, the owner's base address,
// length and a serial naming the region's memfd. Keys come from
// internal/soft.KeyTable (index<<8 | generation); lkey and rkey are equal.
//
// Alloc makes a region in its own memfd (unix.MemfdCreate + unix.Mmap), so
// Addr is the address of that mapping. Register of Go memory is allowed
// only for local use: without AccessRemoteRead/RemoteWrite it makes a
// region usable as the local side of Send, Recv, Write and Read (the
// initiator does the copy, so the peer never needs it); with them it
// returns rdma.ErrNotSupported, because a peer cannot map Go memory. The
// NVMe-oF host exposes Alloc'd pools.
//
// A connection is a SOCK_SEQPACKET Unix socket in the abstract namespace,
// "@capsule-shm/<name>" (no file to clean up), plus a QP block: a memfd
// the dialer creates, holding one endpoint (a handful of atomic words,
// each on its own cache line) and one ring per side (block.go). The
// control socket carries the CM exchange (ctrl.go: connection request,
// accept or reject, each with up to rdma.MaxPrivateData bytes of private
// data; a reject gives the dialer *rdma.RejectError) and passes, with
// SCM_RIGHTS, the dialer's key table and the QP block in the request and
// the acceptor's key table in the accept. Region memfds are fetched on
// first use: the first Write or Read of a peer region sends a fetch
// request naming the rkey and serial; the owner answers with the memfd,
// which the initiator maps and keeps in a view of the peer PD shared by
// all QPs of its PD connected to that PD. A mapping is replaced when its
// key-table entry shows a new serial, dropped when a later fetch finds its
// region deregistered, and unmapped when the last QP using the view
// closes. So each side maps the other's regions, and a Write or Read is
// one copy() by the posting goroutine, checked against the rkey, bounds
// and rights in the shared key table without a round trip.
//
// Sends travel through the rings (entry.go): a 32-byte header (type,
// flags, length, message sequence number, immediate data, rkey to
// invalidate, total) and the payload, padded to 32 bytes. A message
// longer than a quarter of the ring (256 KiB per direction), or one cut by
// the ring's end, is sent in fragments; a pad entry fills the end of the
// ring. The sender copies the SGL into the ring (in PostSend if there is
// room, otherwise later from the QP's provider goroutine); the receiver's
// provider goroutine copies the payload into the posted Recv and pushes
// its completion, then publishes the message number in its endpoint's ack
// word. A Send completes at the sender when acked. WriteImm is a Write
// followed by an entry without payload that consumes a Recv (WCWithImm,
// ByteLen the Write's length); SendInv invalidates the rkey at the
// receiver (below) before the Recv completion is pushed.
//
// # Doorbells and polling
//
// Each side's provider goroutine (rx.go) spins for a budget of polls after
// its last piece of work, yielding now and then: 2000 when the peer is in
// the same process (the hello's pid), where yielding runs the peer's
// goroutines, and 100 when it is another process, where every poll takes
// a CPU from the peer (see rx.go for the numbers). It then stores 1 in its
// endpoint's doorbell word, checks once more, and sleeps in futex(2) on
// that word (FUTEX_WAIT without FUTEX_PRIVATE_FLAG, so it works between
// processes). A producer publishes first and then rings only if the
// doorbell word says 1 (Swap to 0, FUTEX_WAKE). An idle QP therefore
// sleeps without burning a core and a busy one makes no system calls.
// Acks are published at once but not rung for: the next message's ring
// carries them (a request's ack arrives with its answer), and only when
// no message came for ackDelay (1 ms) while the peer sleeps does the RX
// goroutine ring for the ack alone (rx.go). Ringing for every ack woke
// the peer twice per round trip; a host's 4 KiB file reads through
// another process made 1.9 context switches in the target per read
// before and 1.1 after, at 28 instead of 39 µs of target CPU.
// Measured on the 2-core build machine (BenchmarkDoorbell*, round trips
// that always sleep): between two processes a futex round trip took
// 7–20 µs and an eventfd read through the Go netpoller 25–37 µs; within
// one process eventfd was a little faster (6 µs against 7–8 µs) because
// both goroutines run on one thread. The provider is for separate
// processes, so it uses the futex; the cost is one OS thread per QP
// sleeping in futex(2).
//
// # Ordering and completion
//
// Posting holds the QP's send lock for the whole of a WR, copies
// included, so WRs execute in posting order: a Write is in the peer's
// memory before a later Send enters the ring, hence visible when that
// Send's Recv completes; a Read after a Write sees it. Reads finish in
// PostSend, so Fence has nothing to wait for. Completions are pushed in
// posting order: a Write's waits behind an earlier Send still unacked.
// Unsignaled WRs retire silently; errors are always reported. MaxSendWR
// counts WRs posted and not yet retired, MaxRecvWR Recvs posted and not
// yet consumed; beyond them PostSend/PostRecv return ErrQueueFull in a
// *rdma.PostError.
//
// # Errors
//
// A bad rkey, a range outside the region or a missing right fails the WR
// with RemAccessErr before anything is copied; the QP goes to StateError
// with Err() RemAccessErr and so does the peer's, told through the term
// word of this side's endpoint (with a doorbell ring). A Recv too small
// gives the receiver LocLenErr and the sender RemInvReqErr; an unknown
// rkey in a SendInv RemInvReqErr on both sides. A message that finds no
// Recv waits up to (RNRRetry+1)*RNRTimeout, the longer of the two QPs'
// settings so that neither gives up before it was configured to; then
// both sides go to Error with RNRRetryExcErr and the sender's WR completes
// with it. EOF on the control socket without a term word (the peer
// process died or closed its socket) is RetryExcErr: the oldest
// outstanding send WR completes with RetryExcErr, every other outstanding
// WR with WRFlushErr. SetError and Close flush with WRFlushErr and the
// peer goes to Error with WRFlushErr. In StateError, later WRs complete
// with WRFlushErr at once. A Send in flight when the QP fails completes
// with WRFlushErr even if the peer had received it.
//
// # Deregistration
//
// Deregister and SendInv must stop remote access at once. The protocol
// uses the entry's state word and one hazard word per connection side:
//
//   - An initiator stores the rkey in its hazard word, checks the peer's
//     term word, loads the entry, checks state == rkey, rights and bounds,
//     copies, and stores 0 in its hazard word.
//   - The owner CAS'es state from the key to 0, then, for every connected
//     QP of the PD, waits until the peer's hazard word does not hold the
//     key.
//
// Both sides store before they load (sequentially consistent atomics), so
// either the initiator sees state 0 and copies nothing, or the owner sees
// the hazard and waits for the copy to end. The wait is bounded: it ends
// as soon as the peer is known dead (control socket EOF), and after
// hazardWaitLimit (2 s) with a live but stuck peer the connection is
// declared lost (RetryExcErr). For Alloc'd memory this bound is safe:
// deregistered memfd pages are never reused, so a late copy by a stuck
// peer lands in memory nobody reads. After SendInv the region stays
// registered for local use; only its rkey is dead. QP Close sets its term
// word first and waits for the peer's hazard the same way, so no access
// through a closed QP can start or be in progress.
//
// The mappings of a dead peer's memory stay valid (memfd pages live as
// long as a mapping does) until the QPs that use them are closed.
//
// # Concurrency
//
// PD, MR, QP and SRQ methods are safe for concurrent use. Each QP has two
// goroutines once connected: the provider (RX) goroutine and the control
// goroutine, which reads the control socket, serves fetch requests and
// notices EOF. Lock order: qp.sqMu, then the peer view's mu, then pd.mu;
// qp.rqMu and srq.mu are taken alone; errMu is a leaf.
//
// # Race detector
//
// The race detector does not see the shared memory: a Send that the peer
// answers orders, in fact, the posting goroutine before the goroutine that
// polls the answer's completion, but no Go synchronisation connects them.
// In -race builds (race_on.go) every PostSend and PostRecv, the RX
// goroutine after it copied queued Sends into the ring, and whoever copies
// a message entry into the peer's ring just before it publishes the entry
// (so the peer cannot see the entry and acquire first), perform a merging
// release (runtime.RaceReleaseMerge) on one package-wide address, and
// every Recv completion and signaled or failed send completion acquires it
// (runtime.RaceAcquire) before it is pushed to the CQ, whose lock then
// carries the edge to Poll. So whatever a goroutine wrote or read before
// posting happens before whatever any goroutine of this process does after
// polling a later completion, on any QP: the peer may have acted on the
// post before causing that completion (one queue's Send answered through
// another queue, say). Data the provider copies into a Recv or by Read
// reaches the poller through the CQ's lock. Without -race (race_off.go)
// the two calls are empty and inlined away.
//
// # Sharp edges
//
//   - Trusted peers only (above).
//   - One OS thread per sleeping QP (futex).
//   - Mappings of regions a peer deregistered are dropped lazily (at the
//     next fetch on that view) or when the last QP of the view closes.
//   - Inline WRs read their SGEs by address, keys or not: the memory must
//     be valid, as with IBV_SEND_INLINE.
//   - A Write or Read of zero bytes checks no key, as in InfiniBand.
//
// # Libraries
//
// golang.org/x/sys/unix for memfd_create, mmap, futex, SCM_RIGHTS; the
// standard net package for the SOCK_SEQPACKET socket ("unixpacket"),
// which gives message boundaries and netpoller-driven reads.
package shm
