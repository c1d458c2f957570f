package fault

import (
	"errors"
	"fmt"

	"github.com/capsule-storage/capsule/rdma"
)

var (
	// ErrRefused: Injector.Refuse is on for the address. It matches
	// rdma.ErrConnRefused, as a refused connection does.
	ErrRefused = fmt.Errorf("%w: fault: connections to this address are refused", rdma.ErrConnRefused)
	// ErrNoInner: the provider that a fault+<scheme> URL wraps is not
	// linked into the binary. Import it, or rdma/providers.
	ErrNoInner = errors.New("fault: the wrapped provider is not registered")
)
