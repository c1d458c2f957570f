package nvmeof

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatusCodes checks every named status against the SCT and SC the
// specification assigns it (NVMe Base 2.x 4.2.3.1, 4.2.3.2, Figure 105).
func TestStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		s   Status
		sct SCT
		sc  uint8
	}{
		{StatusSuccess, SCTGeneric, 0x00},
		{StatusInvalidOpcode, SCTGeneric, 0x01},
		{StatusInvalidField, SCTGeneric, 0x02},
		{StatusCommandIDConflict, SCTGeneric, 0x03},
		{StatusDataTransferError, SCTGeneric, 0x04},
		{StatusInternalError, SCTGeneric, 0x06},
		{StatusAbortRequested, SCTGeneric, 0x07},
		{StatusInvalidNamespaceOrFormat, SCTGeneric, 0x0b},
		{StatusCommandSequenceError, SCTGeneric, 0x0c},
		{StatusInvalidSGLSegmentDescriptor, SCTGeneric, 0x0d},
		{StatusInvalidNumberOfSGLDescriptors, SCTGeneric, 0x0e},
		{StatusDataSGLLengthInvalid, SCTGeneric, 0x0f},
		{StatusSGLDescriptorTypeInvalid, SCTGeneric, 0x11},
		{StatusSGLOffsetInvalid, SCTGeneric, 0x16},
		{StatusKeepAliveTimerExpired, SCTGeneric, 0x19},
		{StatusKeepAliveTimeoutInvalid, SCTGeneric, 0x1a},
		{StatusTransientTransportError, SCTGeneric, 0x22},
		{StatusLBAOutOfRange, SCTGeneric, 0x80},
		{StatusCapacityExceeded, SCTGeneric, 0x81},
		{StatusNamespaceNotReady, SCTGeneric, 0x82},
		{StatusCompletionQueueInvalid, SCTCommandSpecific, 0x00},
		{StatusInvalidQueueIdentifier, SCTCommandSpecific, 0x01},
		{StatusInvalidQueueSize, SCTCommandSpecific, 0x02},
		{StatusAbortCommandLimitExceeded, SCTCommandSpecific, 0x03},
		{StatusAsyncEventRequestLimitExceeded, SCTCommandSpecific, 0x05},
		{StatusInvalidLogPage, SCTCommandSpecific, 0x09},
		{StatusFeatureNotSaveable, SCTCommandSpecific, 0x0d},
		{StatusFeatureNotChangeable, SCTCommandSpecific, 0x0e},
		{StatusConnectIncompatibleFormat, SCTCommandSpecific, 0x80},
		{StatusConnectControllerBusy, SCTCommandSpecific, 0x81},
		{StatusConnectInvalidParameters, SCTCommandSpecific, 0x82},
		{StatusConnectRestartDiscovery, SCTCommandSpecific, 0x83},
		{StatusConnectInvalidHost, SCTCommandSpecific, 0x84},
		{StatusInvalidQueueType, SCTCommandSpecific, 0x85},
		{StatusDiscoverRestart, SCTCommandSpecific, 0x90},
		{StatusAuthenticationRequired, SCTCommandSpecific, 0x91},
		{StatusWriteFault, SCTMediaDataIntegrity, 0x80},
		{StatusUnrecoveredReadError, SCTMediaDataIntegrity, 0x81},
	} {
		assert.Equal(t, tc.sct, tc.s.SCT(), "%v", tc.s)
		assert.Equal(t, tc.sc, tc.s.SC(), "%v", tc.s)
		assert.Equal(t, tc.s, NewStatus(tc.sct, tc.sc))
		assert.NotEmpty(t, tc.s.name(), "status %#x has no name", uint16(tc.s))
	}
}

// TestStatusBits checks the bit layout of the Status field as bits 15:1
// of the status halfword: SC 8:1, SCT 11:9, CRD 13:12, M 14, DNR 15.
func TestStatusBits(t *testing.T) {
	s := StatusConnectInvalidParameters.WithDNR().WithMore().WithCRD(2)
	assert.Equal(t, uint8(0x82), s.SC())
	assert.Equal(t, SCTCommandSpecific, s.SCT())
	assert.Equal(t, uint8(2), s.CRD())
	assert.True(t, s.More())
	assert.True(t, s.DNR())
	assert.Equal(t, StatusConnectInvalidParameters, s.Code())
	// halfword on the wire: DNR(15)=1 M(14)=1 CRD(13:12)=10b SCT(11:9)=001b SC(8:1)=82h P=0
	assert.Equal(t, uint16(0b1_1_10_001_10000010_0), uint16(s)<<1)
	assert.Equal(t, uint8(3), StatusSuccess.WithCRD(7).CRD(), "CRD keeps two bits")
	assert.False(t, StatusInvalidField.DNR())
	assert.True(t, StatusSuccess.Success())
	assert.True(t, StatusSuccess.WithDNR().Success(), "flags do not make a success a failure")
	assert.False(t, StatusInvalidField.Success())
}

func TestStatusAsError(t *testing.T) {
	assert.NoError(t, StatusSuccess.Err())
	require.Error(t, StatusInvalidField.Err())

	// A status with DNR, wrapped twice, is still found by code.
	err := fmt.Errorf("write: %w", fmt.Errorf("namespace 1: %w", StatusLBAOutOfRange.WithDNR()))
	assert.ErrorIs(t, err, StatusLBAOutOfRange)
	assert.NotErrorIs(t, err, StatusCapacityExceeded)
	var s Status
	require.ErrorAs(t, err, &s)
	assert.True(t, s.DNR())

	assert.Equal(t, StatusSuccess, StatusOf(nil))
	assert.Equal(t, StatusLBAOutOfRange.WithDNR(), StatusOf(err))
	assert.Equal(t, StatusInternalError, StatusOf(errors.New("disk on fire")))

	assert.Equal(t, "nvmeof: invalid field in command (SCT 0h SC 02h, DNR)", StatusInvalidField.WithDNR().Error())
	assert.Equal(t, "status (SCT 7h SC C5h, CRD 1, M)", NewStatus(SCTVendorSpecific, 0xc5).WithCRD(1).WithMore().String())
}

func TestFieldErrorUnwrap(t *testing.T) {
	fe := &FieldError{Structure: "Connect data", Field: "HOSTNQN", Offset: 512, InData: true,
		Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrInvalidNQN}
	err := fmt.Errorf("connect: %w", fe)
	assert.ErrorIs(t, err, ErrInvalidNQN)
	assert.ErrorIs(t, err, StatusConnectInvalidParameters)
	assert.Equal(t, StatusConnectInvalidParameters.WithDNR(), StatusOf(err))
	var got *FieldError
	require.ErrorAs(t, err, &got)
	assert.Equal(t, InvalidParameter{InData: true, Offset: 512}, got.InvalidParameter())
	assert.Contains(t, err.Error(), "HOSTNQN at byte 512")

	// Without a status, the FieldError does not claim one.
	plain := &FieldError{Structure: "x", Field: "y", Err: ErrFieldValue}
	assert.NotErrorIs(t, plain, StatusSuccess)
	assert.Equal(t, StatusInternalError, StatusOf(plain))
}
