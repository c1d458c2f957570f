package verbs

import "github.com/capsule-storage/capsule/rdma"

// Scheme is the URL scheme of the provider: rdma://host:port.
const Scheme = "rdma"

// The provider registers in every build; without the rdma tag each of its
// entry points returns ErrNotBuilt.
func init() { rdma.Register(provider{}) }

var _ rdma.Provider = provider{}
