package providers

import (
	// Each provider registers its scheme with rdma.Register in init.
	_ "github.com/capsule-storage/capsule/rdma/iwarp" // iwarp://host:port
	_ "github.com/capsule-storage/capsule/rdma/shm"   // shm://name
	_ "github.com/capsule-storage/capsule/rdma/verbs" // rdma://host:port (needs -tags rdma and a device)
)
