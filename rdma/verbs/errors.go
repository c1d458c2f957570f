package verbs

import (
	"fmt"
	"syscall"

	"github.com/capsule-storage/capsule/rdma"
)

// Errors of setting up the provider. Both match rdma.ErrNotSupported with
// errors.Is, so code that probes providers can treat them alike.
var (
	// ErrNotBuilt: the binary was built without the rdma tag, so the
	// provider has no access to libibverbs or librdmacm.
	ErrNotBuilt = fmt.Errorf("%w: verbs: built without RDMA support; install libibverbs-dev and librdmacm-dev and rebuild with -tags rdma", rdma.ErrNotSupported)
	// ErrNoDevice: libibverbs finds no RDMA device, or the rdma_cm kernel
	// module is not loaded (no /dev/infiniband/rdma_cm).
	ErrNoDevice = fmt.Errorf("%w: verbs: no RDMA device", rdma.ErrNotSupported)
)

// Errors of connection management.
var (
	// ErrNoRoute: the host does not resolve to an address that an RDMA
	// device of this machine owns or routes to.
	ErrNoRoute = fmt.Errorf("%w: verbs: no RDMA device routes to the host", rdma.ErrNotSupported)
	// ErrUnreachable: the connection manager gave up on the peer
	// (RDMA_CM_EVENT_UNREACHABLE or CONNECT_ERROR): it did not answer.
	ErrUnreachable = fmt.Errorf("verbs: peer unreachable")
)

// CallError is a failed libibverbs or librdmacm call: the function and
// the errno it left. errors.Is(err, syscall.ENOMEM) and the like work.
type CallError struct {
	Op    string        // the C function, e.g. "ibv_reg_mr"
	Errno syscall.Errno // what it reported
}

func (e *CallError) Error() string { return "verbs: " + e.Op + ": " + e.Errno.Error() }

func (e *CallError) Unwrap() error { return e.Errno }
