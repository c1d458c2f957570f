// Package perftest is a perftest-like load generator for the rdma layer,
// behind `bin/target perf serve` and `bin/target perf run`.
//
// A server listens on an RDMA URL. A client connects with a Hello in the
// connection private data (operation, message size, queue depth); the
// server allocates a region of Size*QD bytes with every access right,
// posts QD receives of Size bytes when the operation is send, and answers
// with a Reply naming the region (address, rkey, length).
//
//   - write and read: the client keeps QD one-sided RDMA Writes or Reads of
//     Size bytes in flight, slot i at offset i*Size on both sides. The
//     server's application takes no part; its provider serves them.
//   - send: a request/response exchange. The client sends Size bytes with
//     immediate data naming the slot; the server's loop re-posts the
//     receive and answers with an 8-byte Send with the same immediate. A
//     slot is done when its Send has completed and its answer arrived.
//
// Latency is the time from posting an operation to its completion (for
// send, to the answer), kept in a fixed ring of samples so the run
// allocates nothing per operation; percentiles come from the last
// MaxSamples operations.
//
// Hello and Reply are decoded from peer bytes and have fuzz targets.
package perftest
