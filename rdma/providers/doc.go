// Package providers links every RDMA transport provider built into the
// binary, so that rdma.OpenPD, rdma.Listen and rdma.Dial know their
// schemes:
//
//	import _ "github.com/capsule-storage/capsule/rdma/providers"
//
// That is iwarp://, shm:// and rdma:// (the verbs provider, or with
// -tags rdma absent a stand-in that says how to build it).
//
// It does not link rdma/fault, the fault-injecting wrapper (fault+iwarp://
// and the like): that is a test's seam, not a transport, so the programs
// that import this package (bin/target, bin/mount) refuse fault+ URLs
// with rdma.ErrUnknownScheme. A test that dials or listens on a fault+
// URL imports rdma/fault itself.
package providers
