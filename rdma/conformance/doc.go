// Package conformance is the one body of tests that every RDMA provider
// passes: Run takes a *testing.T and an Env that says how to reach the
// provider, and checks the semantics that package rdma documents, byte for
// byte, as a set of named subtests.
//
//	func TestMain(m *testing.M) { conformance.PeerMain(); os.Exit(m.Run()) }
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Env{
//			ListenURL: func() string { return "iwarp://127.0.0.1:0" },
//			CompleteOnHandoff: true,
//		})
//	}
//
// # What is covered
//
// Send/Recv with gather and scatter lists, inline data, immediate data,
// Send with Invalidate; RDMA Write and Read from 0 bytes to 16 MiB at
// unaligned offsets, with the bytes around the target checked to be
// untouched; ordering of Writes against later Sends and Reads; batches of
// 1000 WRs, queue limits and *rdma.PostError; selective signaling; remote
// access errors (wrong rkey, out of bounds, missing right, rkey used after
// Deregister) with the target memory checked unchanged; receiver not
// ready; a peer process killed mid-transfer and a local Close
// mid-transfer; 64 QPs moving data at once on one shared CQ and on a CQ
// each; CQ batching and Wait cancellation; connection management (private
// data, Reject, nothing listening, Listener.Close); SetError flushing.
//
// # The peer process
//
// The PeerKilled case re-executes the test binary as the peer, selected
// by an environment variable, and kills it with SIGKILL mid-transfer. The
// binary serves as that peer only if its TestMain calls PeerMain first;
// without it the case is skipped with that reason.
//
// # Sizes and the race detector
//
// The largest transfer is 16 MiB, and the sizes are the same with and
// without -race: on the software providers the whole suite runs in
// seconds under the race detector.
//
// # Timeouts
//
// The suite never asserts on time. Every wait has a generous deadline
// (a minute) so that a provider that loses a completion fails the case
// instead of hanging the test binary.
//
// The transfer benchmarks (BenchmarkTransfer, BenchmarkPingPong) live in
// this package's tests beside their same-run baselines (memcpy over the
// same number of buffers a transfer keeps in flight, so both run from the
// same level of cache; loopback TCP); cmd/benchtable turns their
// output into the ratio table of shared/PERFORMANCE.md.
package conformance
