// Package host is capsule's NVMe over Fabrics host: a Go client library
// that connects to NVM subsystems over the RDMA binding (any provider of
// package rdma: iwarp://, shm://, rdma://) or the NVMe/TCP binding
// (tcp://HOST:PORT) and exposes their namespaces as io.ReaderAt /
// io.WriterAt block devices with an asynchronous API beside.
//
//	entries, err := host.Discover(ctx, "iwarp://127.0.0.1:4420")
//	c, err := host.Dial(ctx, "iwarp://127.0.0.1:4420", host.WithSubsystem(nqn))
//	defer c.Close()
//	ns, err := c.Namespace(1)
//	n, err := ns.ReadAt(buf, off)
//
//	// One subsystem through two listeners: I/O follows ANA.
//	m, err := host.DialMultipath(ctx, []string{"tcp://10.0.0.1:4420", "tcp://10.0.0.2:4420"}, host.WithSubsystem(nqn))
//	defer m.Close()
//	mns, err := m.Namespace(1)
//	n, err = mns.WriteAt(buf, off)
//
// The package links the software RDMA providers in (providers.go:
// iwarp://, shm://, and rdma://, which is the cgo verbs provider when
// built with -tags rdma), so a program needs no import beyond this one;
// tcp:// is the package's own. The fault wrapper (fault+SCHEME://) comes
// with an import of rdma/fault.
//
// # Identity
//
// A host presents the machine's identity (identity.go, SystemIdentity),
// the same in every process, as nvme-cli does: the host NQN from
// /etc/nvme/hostnqn when that file exists, else the UUID-form NQN
// "nqn.2014-08.org.nvmexpress:uuid:UUID" with a version 5 (name-based)
// UUID of /etc/machine-id, so that a target's allow-list can name the
// machine without the machine ID being disclosed. The Host Identifier is
// /etc/nvme/hostid, else the NQN's UUID, else the same derivation.
// WithHostNQN and WithHostID override them. A machine with none of these
// files gets a random identity per process (logged as a warning); a file
// that is present but invalid makes Dial fail with ErrInvalidOption.
//
// # Transports
//
// queue.go keeps what every binding shares: the command slots and their
// CIDs, the requests and their chunks, free lists, timeouts and the
// collection of what was in flight when a connection fails. A binding
// implements queueTransport (transport.go): it opens the connection,
// sends capsules, says what SGL1 describes a slot's data with, moves the
// data, and hands responses to the queue on the queue goroutine.
// rdma_queue.go is the RDMA binding described below; tcp_queue.go the
// NVMe/TCP one:
//
//   - ICReq with PFV 0, HPDA 0, MAXR2T 0 and the digests WithTCPDigests
//     asks for (none by default); the ICResp is checked as Linux checks it
//     (PLEN 128, PFV 0, CPDA at most 31, MAXH2CDATA a multiple of 4 and at
//     least 4096, no digest the host did not ask for).
//   - Capsules go in CapsuleCmd PDUs: in-capsule data (SGL 01h) up to the
//     I/O queue's in-capsule size as on RDMA, and up to 8 KiB on the admin
//     queue (Connect's data travels there, as Linux sends it); other data
//     is described by a Transport SGL Data Block (5Ah), and commands
//     without data carry one of length 0. Nothing is registered: slots and
//     buffers are plain memory, admin data moves straight to and from the
//     caller's slice, and so does the data of reads and writes in memory
//     of Controller.AllocBuffer (PDUs written from it, C2HData read into
//     it; see Commands and data).
//   - R2Ts are answered with H2CData PDUs of at most MAXH2CDATA bytes from
//     the slot's memory; C2HData is read from the socket straight into
//     the caller's buffer when the command's range lies in it (else into
//     the slot's memory, then copied, as on RDMA); a C2HData with SUCCESS
//     completes its command.
//   - The queue goroutine only reads. What it must send (the H2CData an
//     R2T asks for, commands issued from Done callbacks) goes to a writer
//     goroutine, all of one batch of PDUs in one writev; commands from
//     other goroutines are written at once. A reader that wrote could
//     wait for a controller that waits to write to it.
//   - A malformed PDU from the controller is answered with an H2CTermReq
//     (FES and FEI as nvmeof.TCPReceiver.Check says) and the connection is
//     dropped: a protocol violation, so the controller is lost and
//     reconnected like any other. A C2HTermReq or a PDU for a command
//     without a transfer outstanding drops it too.
//   - A C2HData whose data digest does not match is not fatal: its bytes
//     are bad, the command it belongs to fails, and the queue goes on
//     serving its other commands. The command completes when its
//     CapsuleResp arrives (at once if the C2HData had SUCCESS) with
//     Transient Transport Error (SCT 0h, SC 22h, DNR clear), the status
//     the target gives a command whose data failed its digest; a
//     CapsuleResp carrying an error status of its own keeps that one. (A
//     Linux host reports Data Transfer Error, 04h, for the same fault.)
//     Like every status but those of a dying controller (see Sharp edges)
//     it is not retried by the host: the request fails with a
//     *CommandError, errors.Is(err, nvmeof.StatusTransientTransportError)
//     holds, and the caller may retry it. Data is placed before its digest
//     can be checked, so the bad bytes may already be in the caller's
//     buffer: after a failed read its contents are undefined, as after any
//     failed read.
//
// # The model
//
// A Controller is one association with a controller: an admin queue and N
// I/O queues, each an NVMe queue on its own reliable-connected QP with its
// own completion queue and goroutine. Dial sets it up as a Linux host
// does:
//
//  1. Admin queue: RDMA_CM private data (RECFMT 0, QID 0, HRQSIZE 32,
//     HSQSIZE 31), then Fabrics Connect with CNTLID FFFFh, the host NQN,
//     the host ID and KATO; its 1024 bytes of data behind a keyed SGL.
//  2. Properties: CAP and VS are read, CC is written with EN, the command
//     set (NVM, all I/O sets, or admin only as CAP.CSS says), a 4 KiB page
//     (or CAP.MPSMIN), round robin, IOSQES 6 and IOCQES 4; CSTS.RDY is
//     polled for CAP.TO.
//  3. Identify Controller, checked as Linux checks it (checkController in
//     admin.go): CNTLID equals Connect's, KAS non-zero (except
//     discovery), IOCCSZ >= 4 and IORCSZ >= 1 (except discovery), MAXCMD
//     set, SGLS bit 2 (keyed SGLs; on TCP: SGLs supported, bits 1:0),
//     ICDOFF 0; and SUBNQN is the subsystem connected to. A failure is a
//     *ControllerCheckError.
//  4. Set Features, Number of Queues: N = WithQueues (default NumCPU),
//     lowered to what the controller grants.
//  5. I/O queues: entries = min(WithQueueDepth+1, MAXCMD, CAP.MQES+1);
//     SQSIZE = HSQSIZE = entries-1 = the commands a queue keeps in flight
//     (so that neither a strict reading of SQSIZE nor MAXCMD is exceeded),
//     further lowered to the CRQSIZE the controller accepts with; HRQSIZE
//     = entries response Recvs. Connect carries the controller ID, its data
//     in the capsule when the controller takes in-capsule data.
//
// Without WithSubsystem, Dial first reads the discovery log at the same
// address and connects to the first NVM subsystem listed there. For a
// controller that reports ANA, the ANA log page is read between steps 3
// and 4 (see ANA and multipath).
//
// # Commands and data
//
// Every command is a Send of its capsule: the 64-byte SQE, PSDT 01b as
// Linux sets it, a CID made of a 12-bit slot index and a 4-bit generation
// (a response for a CID not in flight is a protocol violation). Responses
// are 16-byte Sends into pre-posted Recvs. A capsule of at most 256 bytes
// is sent inline and unsignaled (every depth/2-th signaled, so hardware
// send queues drain); a larger one is signaled, and its slot is reused
// only once both its Send and its response have completed.
//
// Data never leaves registered memory: the host's own, into and out of
// which the caller's buffers are copied (they are never registered), or
// the caller's registered memory of AllocBuffer, which is not copied:
//
//   - Writes of up to the in-capsule size (IOCCSZ*16-64 when SGLS bit 20
//     is set, at most 16 KiB and MDTS) travel in the capsule (SGL Data
//     Block, offset subtype, 01h).
//   - Other data goes through a keyed SGL (40h) into the command slot's
//     own area (the in-capsule size, at least 4 KiB) or into one of the
//     queue's large buffers (WithBuffers of WithMaxTransfer bytes each,
//     lowered to MDTS); the controller RDMA-Reads writes from it and
//     RDMA-Writes reads into it. Writes are copied in when the command is
//     issued, reads copied out when it completes.
//   - Controller.AllocBuffer returns memory outside the Go heap
//     (buffers.go: an anonymous mapping, registered once with the
//     controller's PD; on shm the provider's own memory; on TCP plain
//     mapped memory); FreeBuffer and Close release it. A read or write chunk that lies wholly in it takes
//     no large buffer and no copy: its keyed SGL (40h) names that memory,
//     and a write that travels in the capsule is a Send of two SGEs, the
//     SQE from the slot and the data from that memory (one SGE, copied,
//     when the capsule is small enough to go inline). The lookup is by
//     address, lock-free and allocation-free (TestAllocBufferNoCopy: the
//     host's slots and buffers see none of that data). A passthrough
//     command's Data in that memory moves the same way, unless it is
//     written in the capsule (TestPassthruNoCopy). Memory of another
//     Controller is plain memory here.
//   - Admin and Fabrics data (Connect on the admin queue, Identify, Get
//     Log Page) uses a region registered for that command alone and a
//     keyed SGL with invalidate (4Fh); a response that invalidates any
//     other rkey is a protocol violation. The region is deregistered when
//     the command completes.
//
// Why 40h and not 4Fh on the I/O path: the pools are registered once per
// connection, and invalidating one rkey would end the whole pool; a fresh
// registration per command (what 4Fh implies without a fast-registration
// work request, which the rdma API does not have) would cost an
// allocation, and on shm a memfd, per I/O. The price is stated under
// Sharp edges.
//
// A request larger than one command carries is split at MDTS (and the
// buffer size); Write Zeroes at the same limit and 65536 blocks; a
// discard is one Dataset Management range per command of up to 2^32-1
// blocks. A request's commands run on one I/O queue, chosen round robin
// by Submit, or by the caller with SubmitOn (submiton.go).
//
// # Reservations
//
// Namespace.ReservationRegister, ReservationAcquire, ReservationRelease
// and ReservationReport (reservation.go) send the NVMe reservation
// commands, one command each, as the host identifier of WithHostID; a
// refusal is a *CommandError with Reservation Conflict, and so is a read
// or write the namespace's reservation does not allow this host.
//
// # ANA and multipath
//
// A controller that reports Asymmetric Namespace Access (CMIC bit 3)
// has its ANA log page (0Ch) read when each association is set up
// (before the I/O queues, as Linux reads it: 16 + NANAGRPID*32 + MNAN*4
// bytes, at most 1 MiB, else ANA is ignored), again on each ANA Change
// notice when events are on (AsyncEvent.ANA is the page read, which
// clears the event), and in the background when a command fails with a
// Path Related Status (SCT 3h) (ana.go). Controller.ANAState answers
// from the last page read; Controller.ANALog reads it now. A Namespace
// of one Controller does not fail over: its I/O to an Inaccessible,
// Persistent Loss or Change group fails with the *CommandError carrying
// that status.
//
// DialMultipath (multipath.go) connects to one subsystem through several
// addresses, a Controller per address (a path) with the same options,
// so one host NQN and host ID; without WithSubsystem, the first NVM
// subsystem of the first address's discovery log. It fails only when no
// address connects; the others are dialed again in the background with
// the reconnect backoff, and so is a path whose controller gives up
// (the controller-loss timeout, a refusal) until Close: a path belongs to
// the Multipath for its life. Its paths have Asynchronous Events on (ANA
// Change notices reach the host at once; WithAsyncEvents' function, if
// given, still gets every path's events) and run every request
// FailFast, so that a lost path hands its requests back at once instead
// of parking them behind a reconnect.
//
// A MultipathNamespace has Namespace's methods and contract. Each
// request goes to a path whose controller is live and reports the
// namespace Optimized, else Non-Optimized; among equals, the path in use
// is kept (CurrentPath), as Linux's default policy keeps it. A request
// that a path answers with a Path Related Status is sent again on
// another path, and that path is not used until its ANA log page has
// been read again; so is a request that was in flight when its path was
// lost, or that a reconnecting path refused. Sending a request again is
// safe for the reasons a reconnect resubmits (see below): every command
// is idempotent, and writes in flight together have no order. With no
// usable path a request waits for one, checked on every change a path
// reports and every 50 ms, for up to the controller-loss timeout, then
// fails with ErrNoPath, which names each path's state and wraps the last
// path's error; with FailFast it fails so at once. A path's namespace is
// identified when the path is first usable; one whose size, block size
// or NGUID differs from the first path's is not used. The I/O path
// allocates nothing more than a Namespace's (TestMultipathNoAllocationsPerIO).
//
// # Vendor-specific commands
//
// Controller.Exec sends one vendor-specific I/O command (opcode 80h to
// FFh) as the caller built it (passthru.go): the file service of package
// fs travels this way. The opcode's bits 1:0 give the direction, as NVMe
// defines them. Data to the controller goes in the capsule when it fits,
// else through a keyed SGL into the slot's area or a large buffer; data to
// the host comes back through a keyed SGL and is copied out. A
// bidirectional command (11b) carries its payload as in-capsule data at
// offset 0, not described by SGL1, and its reply through the keyed SGL.
// A passthrough command is one command, never split. After a connection
// loss it is sent again only if it was not yet sent or is marked
// Idempotent; one in flight that is not fails with ErrControllerLost.
//
// # Requests
//
// Namespace.ReadAt, WriteAt, Flush, WriteZeroes and Discard block; Submit
// starts a Request and returns, and its Done callback (or Wait) reports
// the outcome. SubmitBatch starts several on one queue with their
// capsules held and sent together at its end (one post of Sends, one
// writev), as the queue goroutine sends the commands it issues while
// handling a batch of completions (queue.held beside queue.batching). A Request is the caller's and is reused; with it, the
// command slots, the registered buffers and the provider's pre-allocated
// work requests, the steady-state I/O path allocates nothing (R8;
// TestNoAllocationsPerIO, the benchmarks' allocs/op). When every slot of
// the queue is busy, or the controller is reconnecting, a request waits in
// order in a list threaded through the Requests themselves.
//
// # Keep-alive and timeouts
//
// The host asks for KATO (WithKeepAlive, default 5 s) and sends a Keep
// Alive command every KATO/2. A controller that answers none for 3×KATO
// is declared lost: a controller with traffic-based keep-alive may take up
// to 2×KATO to notice silence and end the association itself, which is
// what normally happens first. An I/O command unanswered for WithIOTimeout
// (default 30 s, checked every second) also declares the controller lost.
//
// # Losing and regaining the controller
//
// A controller is lost when a queue's QP fails (the connection dropped, a
// remote access error, a flushed or failed work request), on a keep-alive
// or I/O timeout, on a protocol violation (ErrProtocol), and when the
// controller refuses a command because it is tearing the association
// down (Command Sequence Error or Aborted due to SQ Deletion: the command
// did not run). Then:
//
//   - Every queue of the association is dropped. The commands in flight
//     are collected from the slots; admin commands fail; each I/O
//     request keeps the ranges of its commands that were in flight and
//     waits, with the requests not yet started, on the controller.
//   - The host reconnects (a whole new association, CNTLID FFFFh) after
//     WithReconnectDelay, doubling the delay up to its maximum, until it
//     succeeds or WithCtrlLossTimeout (default 60 s) has passed since the
//     loss. Any failed attempt is followed by another, including one whose
//     new association died during its setup; only a refusal that another
//     attempt would meet again ends the attempts at once: a Connect
//     refused with DNR on the admin queue (the host is not allowed, the
//     subsystem is gone), or on an I/O queue by a controller that is
//     still there. An I/O queue's Connect refused with DNR because the
//     controller the admin queue had just created is gone (its admin
//     queue was cut before the I/O queues connected, so the controller
//     was torn down and its CNTLID is unknown) is one failed attempt: the
//     host checks, with a Property Get of CSTS on the admin queue, which
//     of the two it was. (A Linux host ends reconnecting on any DNR
//     status; this host is more patient only where the refusal's cause
//     is known to be the lost association.) Each namespace in use is
//     identified again; one whose size or block size changed fails its
//     requests with ErrNamespaceChanged.
//   - Once reconnected, the waiting requests are issued again, their
//     interrupted ranges first. When the host gives up, they fail with
//     ErrControllerLost wrapping the cause, and so does everything
//     submitted later (StateDead). Requests with FailFast, and those in
//     flight during more than WithMaxRetries losses, fail at the loss; a
//     FailFast request submitted while the host reconnects is refused by
//     Submit.
//
// Why resubmitting is safe. Every command this package issues on an I/O
// queue is idempotent: running it twice leaves the namespace as running it
// once. A read has no effect; a write stores the same bytes at the same
// LBAs (the data is taken again from the caller's buffer, which the
// caller may not touch until the request completes); Write Zeroes and
// deallocation set the same blocks to the same state; Flush only makes
// durable what is already written. A command in flight at a loss has one
// of two outcomes, unknown to the host: it ran, or it did not. Running it
// again gives the state "it ran" in both cases. Nor can it undo a later
// write: the caller cannot have issued a dependent write to the same
// blocks before this request completed, and writes that are in flight
// together have no order in NVMe, so any order of them is one the caller
// already had to accept. (Linux requeues I/O across a reconnect for the
// same reasons.) What would not be safe to repeat — fused
// compare-and-write, a command that consumed a resource — is never
// issued here; admin commands are never resubmitted, nor are the
// reservation commands (reservation.go: Namespace.ReservationRegister,
// ReservationAcquire, ReservationRelease), which fail with
// ErrControllerLost when in flight at a loss; ReservationReport, which
// changes nothing, is resent. The one
// hazard left is on the controller's side: a command the old association
// received before the loss must not run after the new association has
// completed a later write to the same blocks (a "ghost write"). The host
// cannot close that window (Linux hosts have the same one); it is narrow,
// since a reconnect takes several round trips, and a target closes it by
// finishing or abandoning the old association's commands before it serves
// the same namespace to the new one.
//
// In-flight commands never hang: a failed QP flushes its posted Recvs,
// which the queue goroutine sees; a silent one is caught by the keep-alive
// and I/O timeouts; waiting is bounded by the controller-loss timeout;
// Close fails what is left with ErrClosed.
//
// # Concurrency
//
// Controller and Namespace methods are safe for concurrent use. Each queue
// has one goroutine that reaps completions, copies read data out, and runs
// Done callbacks; commands are issued by whichever goroutine finds a slot
// free (the submitter, or the queue goroutine after a completion). One
// timer goroutine per Controller sends keep-alives and checks timeouts; a
// reconnect runs on a goroutine of its own.
//
// Locks: queue.mu guards a queue's free lists, pending list and the
// requests it holds; Controller.mu guards the state, the association and
// the parked requests; Multipath.mu its namespaces and the requests
// waiting for a path, and is never held while submitting to a path or
// calling a Controller. A Multipath has one goroutine that identifies
// namespaces on paths and sends waiting requests, and one per path being
// dialed; a request that fails on a path is sent to the next from the
// Done of the first, on the first path's queue goroutine. The two are never held together: queues call into
// the Controller, and the Controller into queues, without holding their
// own lock. A Request is guarded by the lock of whichever list or queue
// holds it.
//
// # Sharp edges
//
//   - The I/O buffer pools stay registered, with remote read and write
//     access, for the life of a connection: a controller can read or write
//     them at any time, not only while a command names them. The host
//     trusts the controller it connects to with its pools, and with the
//     memory the caller took from AllocBuffer, registered the same way
//     until FreeBuffer or Close (never with the caller's other memory,
//     which is not registered). Close releases that memory: the caller
//     must not touch it after.
//   - Done runs on a queue goroutine: it must not block, and must not wait
//     for I/O of its own queue (a synchronous ReadAt in Done can deadlock).
//     Submit from Done is fine; Close from Done deadlocks (Close waits for
//     the queue goroutines). Done is never called from inside Submit.
//   - WriteAt, WriteZeroes and Discard must be block-aligned
//     (ErrUnaligned): a read-modify-write would not be atomic against
//     other writers. ReadAt may be unaligned.
//   - NVMe statuses other than those of a dying controller are not
//     retried, whether or not DNR is set; they surface as *CommandError.
//     A request that fails leaves the part of the caller's buffer it was
//     to read undefined.
//   - Flush is sent even when the controller reports no volatile write
//     cache; such a controller completes it at once.
//   - Asynchronous Event Requests are sent only with WithAsyncEvents
//     (events.go) or on a Multipath's paths: then one is kept outstanding
//     on the admin queue, a Namespace Attribute Changed notice is cleared
//     by reading the Changed Namespace List, the namespaces it names are
//     identified again (a handle whose namespace is gone or changed fails
//     with ErrNamespaceChanged), and the caller's function gets the NSIDs;
//     an ANA Change notice is cleared by reading the ANA log page, which
//     the function gets too.
//     Without it, a namespace that changes size while connected is
//     noticed only at a reconnect. Discovery controllers ask for no
//     events.
//   - Discovery entries map to URLs by address family and transport:
//     intra-host (ADRFAM FEh) to shm://TRADDR, RDMA with provider iWARP to
//     iwarp://, other RDMA to rdma://, TCP with SECTYPE 0 to tcp:// (TLS
//     is not supported) (EntryURL).
//   - fault+tcp:// is taken as tcp://: it is the tests' name for a
//     target listener wrapped by internal/netfault
//     (target.WithListenerWrapper), which does the cutting; the host
//     dials plain TCP.
//
// # Libraries
//
// Only the standard library (net for NVMe/TCP), package rdma for the RDMA
// transport, and package nvmeof for every byte on the wire.
package host
