// Package fault is a provider that wraps another and injects faults at
// the API: the seam for tests of what runs above rdma (NVMe-oF reconnect
// and keep-alive, the file service). Importing it registers fault+iwarp,
// fault+shm and fault+rdma; each wraps the provider of that scheme, found
// through rdma.ParseURL at first use, so import order does not matter:
//
//	l, _ := rdma.Listen(ctx, "fault+iwarp://127.0.0.1:0")
//	inj := fault.For(l.Addr()) // or fault.For("127.0.0.1:4420")
//	inj.Drop(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Dialer, After: 3})
//	...
//	require.Equal(t, 1, inj.Count(fault.Drop))
//
// No package outside tests imports it (rdma/providers does not): it is
// linked only into a test binary that imports it, and bin/target and
// bin/mount refuse fault+ URLs as unknown schemes.
//
// # The model
//
// Faults belong to an address. An Injector (For) holds the rules of one
// address, and every QP dialled to it (the host given to Connect) or
// accepted on it (a listener's address) through a fault provider joins
// it when the connection is up. Both ends of a connection join the same
// injector when the dialer uses the listener's address. Injectors of
// different addresses share nothing, so tests with their own listeners
// (port 0) do not disturb each other.
//
// Rules act on send WRs as they are posted (PostSend), chosen by opcode,
// by the side that posts them (Dialer, Acceptor), and by count (After,
// Every, Times) or a probability drawn from the injector's seeded source
// (Seed). The faults:
//
//   - Cut (Injector.Cut now, or CutOn a matching WR): the QPs fail as on a
//     lost connection: StateError, Err RetryExcErr, outstanding WRs
//     complete with WRFlushErr, and the peer sees the connection end.
//   - Drop: the WR vanishes. The peer sees nothing; the connection stays;
//     the sender's WR completes successfully, in order. For keep-alive
//     and timeout tests.
//   - Delay: the WR, and every later WR of its QP, is held for a while and
//     then posted, in order. PostSend returns at once.
//   - Truncate: a Send or Write carries only its first bytes.
//   - Corrupt: bytes of a Send's or Write's payload are flipped on the way
//     out, or of a Read's on the way in. The caller's buffers keep their
//     bytes: the payload goes through a region the wrapper allocates.
//   - Refuse (Injector.Refuse): new connections fail with ErrRefused
//     (Connect) or are rejected (a listener's Accept).
//
// Each injected fault is counted: Injector.Count per Kind, Rule.Hits per
// rule.
//
// # How
//
// PD, QP, Listener and ConnRequest are wrapped; the wrapped objects are
// what the inner provider sees (CreateQP hands it the inner CQs, Accept
// the inner QP). MRs and SRQs are the inner ones. A CQ is wrapped thinly:
// its completions pass through, except that the wrapper posts every send
// WR under a sequence number of its own, and the CQ maps the completion
// back to the caller's ID and opcode. That is what lets a fault finish
// its work when the WR completes: a dropped WR is posted as a zero-length
// Write (which checks no key and consumes no Recv on every transport) and
// reported with its own opcode; a corrupted Read lands in a staging
// region and is scattered, flipped, into the caller's SGL before its
// completion is returned; staging regions are released. WRs the wrapper
// made signaled for that purpose complete silently when the caller did
// not ask for a completion.
//
// # Invariants
//
//   - A QP's WRs reach the inner QP in posting order: one mutex is held
//     across each inner PostSend, and once a WR is held every later WR
//     queues behind it.
//   - No completion is invented: every completion the caller sees is the
//     inner provider's, relabelled. A held WR is posted even when the QP
//     fails or closes (the inner QP flushes it), so nobody waits forever.
//   - The caller's buffers are read, never written, except the sink of a
//     corrupted Read, which is the fault.
//
// # Concurrency
//
// Everything is safe for concurrent use as the rdma API requires. Lock
// order: a QP's mutex, then its injector's; the CQ's map lock is taken
// alone. The delay worker is one goroutine per QP while it holds WRs.
//
// # Sharp edges
//
//   - A rule matches WRs of the QPs that joined its injector; a QP joins
//     at Connect or Accept, so WRs posted before are not faulted.
//     "localhost:4420" and "127.0.0.1:4420" are different addresses.
//   - Injectors live for the process: For creates one per address. Reset
//     clears one.
//   - Corrupt and Truncate read the payload through the lkey's region, so
//     they act on memory registered through the same fault PD (or Inline
//     data); a WR whose SGL the wrapper cannot resolve passes unchanged,
//     and the inner provider reports it as it would.
//   - ByteLen of a send completion is the inner provider's for the WR it
//     was given: zero for a dropped WR, the kept length for a truncated
//     one (the API defines ByteLen for receives).
//   - A held WR that the inner QP refuses for a reason other than a full
//     queue is lost: the QP is moved to StateError so that its other WRs
//     flush.
//   - A Cut QP reports Err RetryExcErr; a peer that is not wrapped sees
//     whatever its provider reports for the connection's end.
//
// # Library
//
// Only the standard library (math/rand for the seeded source).
package fault
