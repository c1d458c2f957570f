// Package iwarp is capsule's userspace iWARP provider: RDMA over TCP with
// MPA framing (RFC 5044), DDP (RFC 5041), RDMAP (RFC 5040) and the
// Immediate Data extension of RFC 7306. It registers the "iwarp" scheme:
//
//	iwarp://127.0.0.1:4420
//
// Import it (or rdma/providers) for its init to call rdma.Register. New
// makes a provider with options (WithCRC(false), WithMaxSegment, …).
//
// # Model
//
// One TCP connection per QP, with SO_SNDBUF and SO_RCVBUF set to
// WithSocketBuffer (default 4 MiB, capped by the kernel's wmem_max and
// rmem_max; 0 keeps the kernel's autotuning). Connect sends an MPA Request carrying the CM
// private data; the listener's ConnRequest answers with an MPA Reply (the
// accept's private data) or a Reply with R set (Reject; the dialer gets
// *rdma.RejectError with the reject's private data). Markers are never
// used; CRC32C is asked for by default and used when either side asks.
//
// Each message is cut into DDP segments of at most WithMaxSegment payload
// bytes (default 65512, so a segment fits the 16-bit ULPDU_Length), each
// framed as one FPDU. Verbs map onto RDMAP as follows:
//
//	OpSend      Send (Send with SE if Solicited)                QN 0
//	OpSendInv   Send with Invalidate (… with SE and Invalidate) QN 0
//	OpWrite     RDMA Write                                      tagged
//	OpRead      one RDMA Read Request per SGE (QN 1), answered
//	            by tagged Read Responses into that SGE
//	OpWriteImm  RDMA Write, then RFC 7306 Immediate Data (opcode
//	            1000b, or 1001b with Solicited) on QN 0 with kind 0
//	OpSendImm   Immediate Data with kind 1, then the Send       QN 0
//
// RFC 7306 Immediate Data is an untagged 8-byte message on queue 0 that
// takes an MSN there. Its 8 bytes are the ULP's; this provider puts the
// 32-bit verbs immediate in the first 4 and a kind word in the next 4.
// Kind 0 (Write with Immediate) consumes one Recv at the receiver, which
// completes as WCRecvWriteImm with WCWithImm, Imm, and ByteLen the length
// of the RDMA Write message just before it; the Recv's buffer is not
// touched. Kind 1 (Send with Immediate) consumes no Recv: it attaches the
// value to the Send that must follow it at once, whose Recv completes as
// WCRecv with WCWithImm. Either way the receiver sees exactly one Recv
// completion. Terminate uses QN 2.
//
// # Where the work runs
//
// PostSend copies the WRs into pre-allocated slots and then the calling
// goroutine transmits them itself, under the connection's write lock.
// When another goroutine is already transmitting, PostSend leaves its
// WRs to it and returns, so concurrent posters return at once. The
// transmitting goroutine (the drainer) takes every WR posted so far, up
// to 64 KiB of payload, and writes their FPDUs with one writev per
// batch: headers, trailers and payloads up to 256 bytes are built in a
// per-connection scratch arena, so a run of small FPDUs is one piece of
// the vector, and larger payloads go straight from registered memory.
// A batch goes out at about 1 MiB of referenced payload (16 segments),
// 1024 vector entries or a full arena, releasing the lock between
// batches; the WRs complete once their batch is written, and WRs posted
// meanwhile form the next batch. So at queue depth one system call
// carries many messages (an NVMe-oF target's RDMA Writes and response
// Sends), and a large Write blocks its poster while TCP accepts it.
//
// Each connected QP runs two goroutines. The receiver reads the stream
// into a 128 KiB buffer, as much as has arrived per read(2), and parses
// the FPDUs in it, copying their payloads to their destination (the
// region an RDMA Write or Read Response names, or the Recv's SGL). The
// rest of a payload of 16 KiB or more is read from the socket directly
// into its destination: on Linux one readv(2) puts it in place and up to
// 2 KiB of what follows (trailer, next header) into the buffer. It
// answers nothing itself but queues inbound Read Requests, so it never
// blocks on the socket's write side. The responder sends Read Responses
// (interleaved with the poster's FPDUs at batch boundaries) and resumes
// the send queue when a Fence or the Read depth made it wait.
//
// Under the race detector (race.go) every batch is preceded by a
// zero-length write(2) and every direct payload read by a zero-length
// read(2) and a plain read: the detector learns socket ordering only from
// syscall.Write and syscall.Read, and without these edges it would report
// the application's reuse of memory that a peer has since written.
//
// # Performance
//
// PERFORMANCE.md R2 asks 1 MiB RDMA Writes and Reads on one connection
// for 75 % of a same-run loopback Go TCP stream with 1 MiB writes
// (BenchmarkTransfer in rdma/conformance, which also reports the process
// CPU time per MiB, and BenchmarkR2Ratio here, which interleaves the
// three). On the 2-core AMD EPYC build machines, CRC on (the default),
// medians of interleaved runs, November 2026:
//
//	                             load  tcp CPU/MiB  write CPU  read CPU  write/tcp  read/tcp
//	before (hash/crc32, autotuned buffers)
//	  BenchmarkTransfer 1MiB      2.4   320 µs       604 µs    677 µs    0.53       0.57
//	  BenchmarkR2Ratio            5.4   342 µs       686 µs    694 µs    0.52       0.51
//	after (internal/crc32c, 4 MiB socket buffers)
//	  BenchmarkTransfer 1MiB      2.4   346 µs       529 µs    537 µs    0.74       0.79
//	  BenchmarkR2Ratio            5.4   338 µs       556 µs    570 µs    0.60       0.60
//
// So R2 holds only while the cores are not contended: under load the
// wall-clock ratio follows the CPU ratio (about 1.5–1.7 times the TCP
// stream's CPU per MiB). Where the rest goes, from profiles: the CRC,
// both ends, about 75 µs per MiB (28 GB/s in place; 35 GB/s on hot
// data); without CRC a Write costs about 1.25 times the TCP stream. The
// receiver makes one readv per FPDU (17 per MiB against 2–3 reads for the
// TCP reader); it is the slower end, so the window stays nearly closed
// and each readv's window update makes it run the sender's transmit and
// the loopback delivery in its own system call, and each arriving segment
// wakes the idle netpoller thread (context switches about 8 % of CPU).
// Tried without gain: 4 or 8 FPDUs per writev instead of 16 (worse;
// the CRC'd batch already sits in the 1 MiB L2), readv as a raw system
// call, and SO_RCVLOWAT raised while the stream is busy (the wakeups come
// anyway once the window is nearly closed). Measured and left out: a
// small send buffer (SO_SNDBUF 256 KiB with SO_RCVBUF 4 MiB) keeps the
// sender's queue short, so it transmits in its own writev and the
// kernel's buffers stay in cache: at load 4.7 it brought CPU per MiB to
// 1.06 (Write) and 1.22 (Read) times the default TCP stream's and the
// wall-clock ratios to 0.98 and 0.93. But the same setting takes the plain
// TCP stream from 285 to 187 µs of CPU per MiB and from 1.9 to 4.1 GB/s
// (2000 MiB, 8 interleaved runs), so it is tuning of loopback, not a
// better provider, and a 512 KiB send window would cap throughput on a
// real network with a longer round trip. TCP_NOTSENT_LOWAT (unsent
// bytes a socket queues) has no such cap; with the 4 MiB buffers 64 KiB
// gave 1.21 and 1.37 times the TCP stream's CPU per MiB and 0.87 and
// 0.86 wall-clock (10 rounds, load 4.4), but 16, 32, 128, 256 KiB and
// 1 MiB gained little or nothing, too sharp an optimum to trust off this
// kernel, and a default-buffer TCP stream with 64 KiB gains as much
// (271 -> 196 µs per MiB, 3.5 -> 5.0 GB/s), so it is left out as well.
// These regimes are also why single runs swing: at load 4 the CPU per MiB
// of BenchmarkTransfer's 1 MiB Write ranged from 447 to 729 µs.
//
// The slow runs of a quiet machine are CPU availability, not state of
// the connection: iwarp needs about 1.5 cores for a 1 MiB stream and the
// TCP baseline less than one, so when the process gets about one core
// (reproduced with one `yes >/dev/null` beside the benchmark) throughput
// becomes available CPU divided by CPU per MiB and only iwarp loses:
// Write 2.95–3.12 → 1.96–2.06 GB/s, Read 2.96–3.03 → 1.91–1.95 GB/s,
// TCP 3.27–3.67 → 2.92–3.48 GB/s, with unchanged CPU per MiB. Some 80
// fresh connections on the quiet machine showed no slow run. The lever on
// the provider's side is CPU per MiB, Read's above all (about 50 µs per
// MiB more than Write's). Loopback here runs BBR, which paces and
// reorders on lo (30–45 retransmits per second of stream); cubic would
// make both TCP and iwarp about 25 % cheaper and leave their ratio at
// about 0.8, so neither side overrides the host's choice.
//
// Small messages at queue depth (nvmeof/host BenchmarkRandRead4KiB,
// iwarp-qd32: an NVMe-oF 4 KiB read is a 64-byte command Send, then a
// 4 KiB RDMA Write and a 16-byte response Send) were bound by system
// calls: 3.1 writev, 1.4 readv and 1.2 read per read, 29 us of process
// CPU, 59k reads/s. Sending every WR posted so far in one writev and
// parsing every FPDU one read(2) brought in made it 0.16 writev and 0.25
// read per read, about 6.7 us of CPU (half of it the kernel's TCP, the
// rest CRC32C, copies and the NVMe-oF layers) and about 200k reads/s.
// Payloads under 16 KiB are copied out of the receive buffer: a copy of
// 4 KiB costs less than the system call it saves. A large payload is
// still read in place, and while large payloads arrive a header read
// takes at most 2 KiB, so a 1 MiB stream keeps its one readv per 64 KiB
// segment and copies nothing more. At queue depth 1 the CQs do not spin
// (soft.CQ.SetSpin(0)): an execution trace shows both ends' goroutines
// taking turns on one processor, where a waiter's polls only delay the
// receiver that would complete its work. Tried without gain (measured
// at load 7-10 only, so small effects would not show): holding the
// receiver's Recv completions and pushing them to the CQ together before
// each read (QD 32 process CPU and writev count per read unchanged), and
// yielding the processor after completing a Recv so that the woken
// consumer runs before the receiver's next read (QD 1 p50 unchanged).
//
// Not done: reading several FPDUs per readv by guessing where the next
// segment goes. A Write does not say its length, so a wrong guess (a Read
// Response or Send between two segments, which this provider's own
// sender produces at batch boundaries) would leave the next FPDU's bytes
// past the end of the Write in memory the peer never wrote; only Read
// Responses, whose length the Read Request fixed, could do it safely,
// with a replay of misplaced bytes.
//
// # Invariants and semantics
//
//   - Sends and Writes complete once written to TCP; Reads when their last
//     Read Response is placed. Completions of a QP are in posting order.
//     Unsignaled WRs complete silently; errors are always reported.
//   - Every remote access (inbound Write, inbound Read Request) is checked
//     with soft.KeyTable.Acquire for rkey, bounds and rights before a byte
//     moves, and the region is held (Acquire … Release) while bytes move,
//     so Deregister waits for it. A failed check answers with a Terminate
//     (RDMAP layer, remote protection error, code invalid STag, base or
//     bounds, or access rights, with the offending DDP header and, for a
//     Read Request, the Read Request header copied), and both QPs go to
//     StateError with Err() RemAccessErr.
//   - Read Requests that fail are answered in order: the Terminate follows
//     the responses to the requests before it.
//   - A Read Response must match the oldest outstanding Read Request (sink
//     STag, offset, length); anything else is a protocol error, so a peer
//     cannot write into local memory through a forged response.
//   - A Send or Write with Immediate that finds no Recv makes the receiver
//     stop reading the stream for up to (RNRRetry+1)*RNRTimeout; then it
//     sends a Terminate (DDP untagged buffer error, no buffer available)
//     and both QPs fail with RNRRetryExcErr.
//   - A Send longer than its Recv completes that Recv with LocLenErr and
//     sends a Terminate (DDP, message too long); the sender's QP fails
//     with RemInvReqErr.
//   - Malformed input (bad CRC, ULPDU_Length shorter than its header,
//     wrong DDP or RDMAP version, unknown opcode, an opcode in the wrong
//     buffer model, bad queue number, MSN or MO out of sequence, wrong
//     length for a Read Request, Immediate Data or Terminate) gets a
//     Terminate with the matching cause and ends that connection only.
//     The receiver never allocates for a frame: payloads land in registered
//     memory, headers and control messages in fixed buffers.
//   - On StateError (Done closes first, then the queues are flushed) the
//     oldest outstanding send WR, if it was already on the wire, completes
//     with the status that caused the error (RemAccessErr for the faulting
//     Read, RNRRetryExcErr, RetryExcErr when the connection was lost); the
//     rest, and all Recvs, complete with WRFlushErr, as do WRs posted
//     later. SetError and Close flush with WRFlushErr and close the
//     connection; the peer then fails with RetryExcErr.
//   - ReadDepth (128) bounds outstanding Read Requests in both directions;
//     a Read WR takes one per SGE. More wait in the send queue (as a Fence
//     does), and a peer that exceeds it gets a Terminate.
//
// # Concurrency
//
// PD, MR and QP methods are safe for concurrent use. Each QP documents its
// lock order at the type: mu, then sq.mu, then rq.mu, then the CQ's lock;
// the write lock (tx.mu) and the inbound Read queue lock are never held
// with another. Steady-state posting, transmitting, receiving and
// completing allocate nothing.
//
// # Sharp edges
//
//   - Payload bytes are placed before the FPDU's CRC is checked (the check
//     needs all of them). A CRC failure terminates the connection and the
//     message never completes, and the write had already passed its STag,
//     bounds and rights check, so only memory the peer could write anyway
//     can hold its bytes.
//   - A region is held (read-locked) while a payload streams into it or a
//     Read Response batch streams out of it, so Deregister can wait for a
//     slow peer for as long as one segment or batch takes.
//   - Local SGEs are checked when the WR is transmitted (or a Recv is
//     filled), not at post: a bad lkey completes the WR with LocProtErr and
//     fails the QP. Inline SGEs whose lkey does not resolve are read from
//     their Addr as a raw address, as verbs does; it must be valid.
//   - After a Terminate the QP keeps reading, discarding, until the peer
//     closes or 2 s pass, so Close of such a QP may take that long.
//   - MPA revision 1 only (RFC 6581 is not spoken), no markers; shared
//     receive queues are not implemented (CreateSRQ: ErrNotSupported).
//     Solicited events are sent (SE opcodes) but raise nothing locally:
//     the CQ API has no notification arming.
//
// # Libraries
//
// The standard library's net (TCPConn, net.Buffers for writev), the
// shared rdma/internal/soft CQ and KeyTable, and klauspost/cpuid (already
// the project's, for chunkstore) to detect the CPU. The wire formats live
// in internal/wire. The FPDU CRC32C of headers and payloads is
// internal/crc32c: the same function as hash/crc32's Castagnoli, but on
// amd64 with VPCLMULQDQ it runs 256-bit carry-less folding and three
// CRC32 instruction streams interleaved in one loop, so both units work
// at once: about 35 GB/s on the AMD EPYC (Zen 4, AVX-512 hidden) build
// machines against about 20 GB/s for hash/crc32 on a 64 KiB segment.
// Elsewhere, with the purego tag, and for buffers under 2 KiB it is
// hash/crc32 itself. Its tests compare it with hash/crc32 for every
// length to 4 KiB at every alignment and around its block boundaries, and
// a fuzz target keeps doing so; TestCRCMatchesStdlib checks full-size
// FPDUs both ways against a peer that frames with hash/crc32.
package iwarp
