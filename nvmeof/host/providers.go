package host

import (
	// Dial and Discover take RDMA URLs with nothing more imported: the
	// software providers register their schemes in init. The fault
	// wrapper (fault+SCHEME://) is not linked: a test that wants it
	// imports rdma/fault.
	_ "github.com/capsule-storage/capsule/rdma/iwarp" // iwarp://host:port
	_ "github.com/capsule-storage/capsule/rdma/shm"   // shm://name
	// rdma://host:port: the cgo libibverbs provider when built with
	// -tags rdma, else a stand-in that says how to build it.
	_ "github.com/capsule-storage/capsule/rdma/verbs"
)
