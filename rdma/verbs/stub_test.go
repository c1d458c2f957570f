//go:build !rdma || !cgo

package verbs

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestStubRegistersScheme(t *testing.T) {
	assert.Contains(t, rdma.Schemes(), "rdma")
}

func TestStubOpenPD(t *testing.T) {
	pd, err := rdma.OpenPD("rdma://127.0.0.1:4420")
	assert.Nil(t, pd)
	require.Error(t, err)
	assert.True(t, errors.Is(err, rdma.ErrNotSupported))
	assert.True(t, errors.Is(err, ErrNotBuilt))
	assert.Contains(t, err.Error(), "-tags rdma")
	assert.Contains(t, err.Error(), "libibverbs-dev")
}

func TestStubListenAndDial(t *testing.T) {
	l, err := rdma.Listen(context.Background(), "rdma://127.0.0.1:0")
	assert.Nil(t, l)
	assert.ErrorIs(t, err, rdma.ErrNotSupported)

	// Dial needs a PD first; the provider refuses that already.
	_, err = provider{}.OpenPD("10.0.0.1")
	assert.ErrorIs(t, err, ErrNotBuilt)
}
