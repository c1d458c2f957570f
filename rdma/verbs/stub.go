//go:build !rdma || !cgo

package verbs

import (
	"context"

	"github.com/capsule-storage/capsule/rdma"
)

// provider is the stand-in of a binary built without the rdma tag: it
// keeps the scheme known, so rdma://… URLs fail with a message a person
// can act on instead of ErrUnknownScheme.
type provider struct{}

func (provider) Scheme() string { return Scheme }

// OpenPD returns ErrNotBuilt.
func (provider) OpenPD(host string) (rdma.PD, error) { return nil, ErrNotBuilt }

// Listen returns ErrNotBuilt.
func (provider) Listen(ctx context.Context, host string) (rdma.Listener, error) {
	return nil, ErrNotBuilt
}
