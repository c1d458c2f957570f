package nvmeof

import (
	"errors"
	"fmt"
	"strings"
)

// SCT is a Status Code Type (NVMe Base 2.x, 4.2.3).
type SCT uint8

// Status code types.
const (
	SCTGeneric            SCT = 0x0 // Generic Command Status
	SCTCommandSpecific    SCT = 0x1 // Command Specific Status (and Fabrics command status)
	SCTMediaDataIntegrity SCT = 0x2 // Media and Data Integrity Errors
	SCTPathRelated        SCT = 0x3 // Path Related Status
	SCTVendorSpecific     SCT = 0x7 // Vendor Specific
)

// Status is the outcome of a command: the 15-bit Status field of a
// completion queue entry (bits 31:17 of Dword 3), shifted down by one so
// that the phase tag is not part of it. Its bits are:
//
//	 7:0  SC   Status Code
//	10:8  SCT  Status Code Type
//	12:11 CRD  Command Retry Delay
//	13    M    More
//	14    DNR  Do Not Retry
//
// Status implements error. errors.Is matches a Status target on SCT and SC
// alone, so errors.Is(err, StatusInvalidField) holds whether or not the
// completion also set DNR, M or CRD. The zero value is StatusSuccess.
type Status uint16

const (
	statusSCMask   = 0x00ff
	statusSCTShift = 8
	statusSCTMask  = 0x0700
	statusCRDShift = 11
	statusCRDMask  = 0x1800
	statusMore     = 0x2000
	statusDNR      = 0x4000
	statusMask     = 0x7fff // the 15 bits of the wire field
)

const (
	generic            Status = Status(SCTGeneric) << statusSCTShift
	commandSpecific    Status = Status(SCTCommandSpecific) << statusSCTShift
	mediaDataIntegrity Status = Status(SCTMediaDataIntegrity) << statusSCTShift
	pathRelated        Status = Status(SCTPathRelated) << statusSCTShift
)

// Generic command status (SCT 0h), NVMe Base 2.x 4.2.3.1.
const (
	StatusSuccess                       = generic | 0x00
	StatusInvalidOpcode                 = generic | 0x01
	StatusInvalidField                  = generic | 0x02
	StatusCommandIDConflict             = generic | 0x03
	StatusDataTransferError             = generic | 0x04
	StatusAbortedPowerLoss              = generic | 0x05
	StatusInternalError                 = generic | 0x06
	StatusAbortRequested                = generic | 0x07
	StatusAbortedSQDeletion             = generic | 0x08
	StatusAbortedFailedFused            = generic | 0x09
	StatusAbortedMissingFused           = generic | 0x0a
	StatusInvalidNamespaceOrFormat      = generic | 0x0b
	StatusCommandSequenceError          = generic | 0x0c
	StatusInvalidSGLSegmentDescriptor   = generic | 0x0d
	StatusInvalidNumberOfSGLDescriptors = generic | 0x0e
	StatusDataSGLLengthInvalid          = generic | 0x0f
	StatusMetadataSGLLengthInvalid      = generic | 0x10
	StatusSGLDescriptorTypeInvalid      = generic | 0x11
	StatusSGLOffsetInvalid              = generic | 0x16
	StatusHostIDInconsistentFormat      = generic | 0x18
	StatusKeepAliveTimerExpired         = generic | 0x19
	StatusKeepAliveTimeoutInvalid       = generic | 0x1a
	StatusNamespaceWriteProtected       = generic | 0x20
	StatusCommandInterrupted            = generic | 0x21
	StatusTransientTransportError       = generic | 0x22

	// I/O command set specific codes in the generic range (80h..BFh).
	StatusLBAOutOfRange       = generic | 0x80
	StatusCapacityExceeded    = generic | 0x81
	StatusNamespaceNotReady   = generic | 0x82
	StatusReservationConflict = generic | 0x83
	StatusFormatInProgress    = generic | 0x84
)

// Command specific status (SCT 1h), NVMe Base 2.x 4.2.3.2 (Figure 103).
const (
	StatusCompletionQueueInvalid         = commandSpecific | 0x00
	StatusInvalidQueueIdentifier         = commandSpecific | 0x01
	StatusInvalidQueueSize               = commandSpecific | 0x02
	StatusAbortCommandLimitExceeded      = commandSpecific | 0x03
	StatusAsyncEventRequestLimitExceeded = commandSpecific | 0x05
	StatusInvalidFirmwareSlot            = commandSpecific | 0x06
	StatusInvalidLogPage                 = commandSpecific | 0x09
	StatusInvalidFormat                  = commandSpecific | 0x0a
	StatusFeatureNotSaveable             = commandSpecific | 0x0d
	StatusFeatureNotChangeable           = commandSpecific | 0x0e
	StatusFeatureNotNamespaceSpecific    = commandSpecific | 0x0f
)

// Fabrics command specific status (SCT 1h, SC 80h..BFh), NVMe Base 2.x
// Figure 105 (NVMe over Fabrics 1.1, "Fabrics Command Status Values").
// The same codes mean other things for NVM I/O commands (80h is
// Conflicting Attributes there); String names the Fabrics meaning.
const (
	StatusConnectIncompatibleFormat = commandSpecific | 0x80
	StatusConnectControllerBusy     = commandSpecific | 0x81
	StatusConnectInvalidParameters  = commandSpecific | 0x82
	StatusConnectRestartDiscovery   = commandSpecific | 0x83
	StatusConnectInvalidHost        = commandSpecific | 0x84
	StatusInvalidQueueType          = commandSpecific | 0x85
	StatusDiscoverRestart           = commandSpecific | 0x90
	StatusAuthenticationRequired    = commandSpecific | 0x91
)

// Media and data integrity errors (SCT 2h).
const (
	StatusWriteFault           = mediaDataIntegrity | 0x80
	StatusUnrecoveredReadError = mediaDataIntegrity | 0x81
	StatusAccessDenied         = mediaDataIntegrity | 0x86
)

// Path related status (SCT 3h), NVMe Base 2.x 4.2.3.4: the command was
// not run because of the path it came by. A host retries it through
// another controller (these come without DNR).
const (
	StatusInternalPathError = pathRelated | 0x00
	// StatusANAPersistentLoss: Asymmetric Access Persistent Loss.
	StatusANAPersistentLoss = pathRelated | 0x01
	// StatusANAInaccessible: Asymmetric Access Inaccessible.
	StatusANAInaccessible = pathRelated | 0x02
	// StatusANATransition: Asymmetric Access Transition.
	StatusANATransition = pathRelated | 0x03
)

// NewStatus returns the status with the given type and code, with CRD, M
// and DNR cleared.
func NewStatus(sct SCT, sc uint8) Status {
	return Status(sct&7)<<statusSCTShift | Status(sc)
}

// SC returns the Status Code.
func (s Status) SC() uint8 { return uint8(s & statusSCMask) }

// SCT returns the Status Code Type.
func (s Status) SCT() SCT { return SCT((s & statusSCTMask) >> statusSCTShift) }

// CRD returns the Command Retry Delay (0 to 3): which CRDTn field of the
// Identify Controller data the host waits for before retrying.
func (s Status) CRD() uint8 { return uint8((s & statusCRDMask) >> statusCRDShift) }

// More reports the M bit: the Error Information log page has more.
func (s Status) More() bool { return s&statusMore != 0 }

// DNR reports the Do Not Retry bit.
func (s Status) DNR() bool { return s&statusDNR != 0 }

// Code returns the status with only SCT and SC, CRD, M and DNR cleared.
func (s Status) Code() Status { return s & (statusSCTMask | statusSCMask) }

// WithDNR returns s with Do Not Retry set.
func (s Status) WithDNR() Status { return s | statusDNR }

// WithMore returns s with the More bit set.
func (s Status) WithMore() Status { return s | statusMore }

// WithCRD returns s with Command Retry Delay set to crd (0 to 3; higher
// bits are dropped).
func (s Status) WithCRD(crd uint8) Status {
	return s&^statusCRDMask | Status(crd&3)<<statusCRDShift
}

// Success reports whether SCT and SC are both zero.
func (s Status) Success() bool { return s.Code() == StatusSuccess }

// Err returns nil for a successful status and s otherwise.
func (s Status) Err() error {
	if s.Success() {
		return nil
	}
	return s
}

// Is makes errors.Is(err, target) match a Status target on SCT and SC.
func (s Status) Is(target error) bool {
	t, ok := target.(Status)
	return ok && t.Code() == s.Code()
}

// Error describes the status, for example
// "nvmeof: invalid field in command (SCT 0h SC 02h, DNR)".
func (s Status) Error() string { return "nvmeof: " + s.String() }

// String names the status, followed by its SCT, SC and set flags.
func (s Status) String() string {
	var b strings.Builder
	if name := s.name(); name != "" {
		b.WriteString(name)
	} else {
		b.WriteString("status")
	}
	fmt.Fprintf(&b, " (SCT %Xh SC %02Xh", uint8(s.SCT()), s.SC())
	if s.CRD() != 0 {
		fmt.Fprintf(&b, ", CRD %d", s.CRD())
	}
	if s.More() {
		b.WriteString(", M")
	}
	if s.DNR() {
		b.WriteString(", DNR")
	}
	b.WriteString(")")
	return b.String()
}

func (s Status) name() string {
	switch s.Code() {
	case StatusSuccess:
		return "successful completion"
	case StatusInvalidOpcode:
		return "invalid command opcode"
	case StatusInvalidField:
		return "invalid field in command"
	case StatusCommandIDConflict:
		return "command ID conflict"
	case StatusDataTransferError:
		return "data transfer error"
	case StatusAbortedPowerLoss:
		return "command aborted due to power loss notification"
	case StatusInternalError:
		return "internal error"
	case StatusAbortRequested:
		return "command abort requested"
	case StatusAbortedSQDeletion:
		return "command aborted due to SQ deletion"
	case StatusAbortedFailedFused:
		return "command aborted due to failed fused command"
	case StatusAbortedMissingFused:
		return "command aborted due to missing fused command"
	case StatusInvalidNamespaceOrFormat:
		return "invalid namespace or format"
	case StatusCommandSequenceError:
		return "command sequence error"
	case StatusInvalidSGLSegmentDescriptor:
		return "invalid SGL segment descriptor"
	case StatusInvalidNumberOfSGLDescriptors:
		return "invalid number of SGL descriptors"
	case StatusDataSGLLengthInvalid:
		return "data SGL length invalid"
	case StatusMetadataSGLLengthInvalid:
		return "metadata SGL length invalid"
	case StatusSGLDescriptorTypeInvalid:
		return "SGL descriptor type invalid"
	case StatusSGLOffsetInvalid:
		return "SGL offset invalid"
	case StatusHostIDInconsistentFormat:
		return "host identifier inconsistent format"
	case StatusKeepAliveTimerExpired:
		return "keep alive timer expired"
	case StatusKeepAliveTimeoutInvalid:
		return "keep alive timeout invalid"
	case StatusNamespaceWriteProtected:
		return "namespace is write protected"
	case StatusCommandInterrupted:
		return "command interrupted"
	case StatusTransientTransportError:
		return "transient transport error"
	case StatusLBAOutOfRange:
		return "LBA out of range"
	case StatusCapacityExceeded:
		return "capacity exceeded"
	case StatusNamespaceNotReady:
		return "namespace not ready"
	case StatusReservationConflict:
		return "reservation conflict"
	case StatusFormatInProgress:
		return "format in progress"
	case StatusCompletionQueueInvalid:
		return "completion queue invalid"
	case StatusInvalidQueueIdentifier:
		return "invalid queue identifier"
	case StatusInvalidQueueSize:
		return "invalid queue size"
	case StatusAbortCommandLimitExceeded:
		return "abort command limit exceeded"
	case StatusAsyncEventRequestLimitExceeded:
		return "asynchronous event request limit exceeded"
	case StatusInvalidFirmwareSlot:
		return "invalid firmware slot"
	case StatusInvalidLogPage:
		return "invalid log page"
	case StatusInvalidFormat:
		return "invalid format"
	case StatusFeatureNotSaveable:
		return "feature identifier not saveable"
	case StatusFeatureNotChangeable:
		return "feature not changeable"
	case StatusFeatureNotNamespaceSpecific:
		return "feature not namespace specific"
	case StatusConnectIncompatibleFormat:
		return "connect incompatible format"
	case StatusConnectControllerBusy:
		return "connect controller busy"
	case StatusConnectInvalidParameters:
		return "connect invalid parameters"
	case StatusConnectRestartDiscovery:
		return "connect restart discovery"
	case StatusConnectInvalidHost:
		return "connect invalid host"
	case StatusInvalidQueueType:
		return "invalid queue type"
	case StatusDiscoverRestart:
		return "discover restart"
	case StatusAuthenticationRequired:
		return "authentication required"
	case StatusWriteFault:
		return "write fault"
	case StatusUnrecoveredReadError:
		return "unrecovered read error"
	case StatusAccessDenied:
		return "access denied"
	case StatusInternalPathError:
		return "internal path error"
	case StatusANAPersistentLoss:
		return "asymmetric access persistent loss"
	case StatusANAInaccessible:
		return "asymmetric access inaccessible"
	case StatusANATransition:
		return "asymmetric access transition"
	}
	return ""
}

// StatusOf returns the status a controller completes a command with when
// handling it returned err: StatusSuccess for nil, the Status found in
// err's chain if there is one, and StatusInternalError otherwise.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var s Status
	if errors.As(err, &s) {
		return s
	}
	return StatusInternalError
}
