package nvmeof

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rdmacmRequestBytes is the private data of an RDMA_CM_REQUEST for I/O
// queue 1 of controller 1 with 128 entries, as a Linux host sends it
// (NVMe RDMA Transport Specification, RDMA_CM_REQUEST private data).
var rdmacmRequestBytes = annotated(`
	00 00        # 01:00  RECFMT 0
	01 00        # 03:02  QID 1
	80 00        # 05:04  HRQSIZE 128
	7f 00        # 07:06  HSQSIZE 127 (128 entries, 0's based)
	01 00        # 09:08  CNTLID 1
	00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 31:10 reserved
`)

func TestRDMACMRequest(t *testing.T) {
	var r RDMACMRequest
	require.NoError(t, r.UnmarshalBinary(rdmacmRequestBytes))
	want := RDMACMRequest{QID: 1, HRQSize: 128, HSQSize: 127, CNTLID: 1}
	assert.Equal(t, want, r)
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, rdmacmRequestBytes, out)

	// The connection manager may pad the private data (56 bytes here).
	require.NoError(t, r.UnmarshalBinary(append(append([]byte{}, rdmacmRequestBytes...), make([]byte, 24)...)))
	assert.Equal(t, want, r)

	assert.Equal(t, RDMACMStatus(0), r.CheckQueueSizes(128))
	assert.Equal(t, RDMACMInvalidHSQSIZE, r.CheckQueueSizes(127))
	r.HSQSize = 0
	assert.Equal(t, RDMACMInvalidHSQSIZE, r.CheckQueueSizes(128))
	r.HSQSize, r.HRQSize = 31, 0
	assert.Equal(t, RDMACMInvalidHRQSIZE, r.CheckQueueSizes(128))
	r.HRQSize = 129
	assert.Equal(t, RDMACMInvalidHRQSIZE, r.CheckQueueSizes(128))
}

func TestRDMACMRequestRefusals(t *testing.T) {
	var r RDMACMRequest
	err := r.UnmarshalBinary(rdmacmRequestBytes[:31])
	assert.ErrorIs(t, err, ErrShortBuffer)
	assert.ErrorIs(t, err, RDMACMInvalidPrivateDataLength)
	assert.Equal(t, RDMACMInvalidPrivateDataLength, RDMACMStatusOf(err))

	b := append([]byte{}, rdmacmRequestBytes...)
	b[0] = 1
	err = r.UnmarshalBinary(b)
	assert.ErrorIs(t, err, RDMACMInvalidRECFMT)
	assert.ErrorIs(t, err, ErrFieldValue)
	assert.Equal(t, RDMACMInvalidRECFMT, RDMACMStatusOf(fmt.Errorf("listener: %w", err)))

	assert.Equal(t, RDMACMStatus(0), RDMACMStatusOf(nil))
	assert.Equal(t, RDMACMNoResources, RDMACMStatusOf(errors.New("out of QPs")))
	_, err = r.MarshalTo(make([]byte, 31))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

func TestRDMACMAccept(t *testing.T) {
	b := annotated(`
		00 00        # 01:00  RECFMT 0
		80 00        # 03:02  CRQSIZE 128
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 31:04 reserved
	`)
	var a RDMACMAccept
	require.NoError(t, a.UnmarshalBinary(b))
	assert.Equal(t, RDMACMAccept{CRQSize: 128}, a)
	out, err := a.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	assert.ErrorIs(t, a.UnmarshalBinary(b[:31]), ErrShortBuffer)
	b[0] = 2
	assert.ErrorIs(t, a.UnmarshalBinary(b), ErrFieldValue)
}

func TestRDMACMReject(t *testing.T) {
	b := annotated(`
		00 00        # 01:00  RECFMT 0
		09 00        # 03:02  STS 09h: invalid CNTLID
	`)
	var j RDMACMReject
	require.NoError(t, j.UnmarshalBinary(b))
	assert.Equal(t, RDMACMReject{Status: RDMACMInvalidCNTLID}, j)
	out, err := j.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	assert.ErrorIs(t, j.UnmarshalBinary(b[:3]), ErrShortBuffer)
	b[1] = 1
	assert.ErrorIs(t, j.UnmarshalBinary(b), ErrFieldValue)
}

// TestRDMACMStatusCodes checks the reject status values (NVMe RDMA
// Transport Specification, RDMA_CM_REJECT status codes).
func TestRDMACMStatusCodes(t *testing.T) {
	for st, v := range map[RDMACMStatus]uint16{
		RDMACMInvalidPrivateDataLength: 0x01, RDMACMInvalidRECFMT: 0x02, RDMACMInvalidQID: 0x03,
		RDMACMInvalidHSQSIZE: 0x04, RDMACMInvalidHRQSIZE: 0x05, RDMACMNoResources: 0x06,
		RDMACMInvalidIRD: 0x07, RDMACMInvalidORD: 0x08, RDMACMInvalidCNTLID: 0x09,
	} {
		assert.Equal(t, v, uint16(st))
		assert.NotContains(t, st.String(), "RDMA_CM status", "%#x has no name", v)
	}
	assert.Equal(t, "RDMA_CM status 0x0", RDMACMStatus(0).String())
	assert.Equal(t, "RDMA_CM status 0xa", RDMACMStatus(10).String())
	assert.Equal(t, "nvmeof: RDMA_CM reject: invalid HSQSIZE", RDMACMInvalidHSQSIZE.Error())
}
