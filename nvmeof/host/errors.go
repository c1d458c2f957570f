package host

import (
	"errors"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Errors of setting up a controller (Dial, Discover, Namespace).
var (
	// ErrInvalidOption: an option holds a value that cannot be used (a
	// negative count, an invalid NQN).
	ErrInvalidOption = errors.New("nvmeof/host: invalid option")
	// ErrIncompatibleController: the controller failed a check that a
	// Linux host makes before it uses a controller. A
	// *ControllerCheckError says which field.
	ErrIncompatibleController = errors.New("nvmeof/host: incompatible controller")
	// ErrNoSubsystem: Dial was given no subsystem and the discovery log
	// lists no NVM subsystem.
	ErrNoSubsystem = errors.New("nvmeof/host: no NVM subsystem in the discovery log")
	// ErrNamespaceNotFound: the namespace is not active on the controller
	// (Identify Namespace returned a zero structure).
	ErrNamespaceNotFound = errors.New("nvmeof/host: namespace not active")
	// ErrNotSupported: the controller or namespace lacks what the call
	// needs: Write Zeroes or Dataset Management not in ONCS, a namespace
	// format with metadata, a transport a discovery entry names that no
	// provider serves.
	ErrNotSupported = errors.New("nvmeof/host: not supported")
)

// Errors of a controller's life.
var (
	// ErrClosed: the Controller was closed; requests still queued or in
	// flight when Close gave up waiting fail with it.
	ErrClosed = errors.New("nvmeof/host: controller closed")
	// ErrControllerLost: the connection to the controller was lost and
	// the request was not (or could no longer be) resubmitted: the
	// controller-loss timeout ran out, the controller refused to take the
	// host back, the request asked to fail fast, or it was in flight
	// during too many losses. It is wrapped together with the cause.
	ErrControllerLost = errors.New("nvmeof/host: controller lost")
	// ErrKeepAliveTimeout: a Keep Alive command was not answered within
	// three times the keep-alive timeout; the host treats the controller
	// as lost.
	ErrKeepAliveTimeout = errors.New("nvmeof/host: keep alive not answered in time")
	// ErrCommandTimeout: an I/O command was not answered within the I/O
	// timeout; the host treats the controller as lost.
	ErrCommandTimeout = errors.New("nvmeof/host: command not answered in time")
	// ErrProtocol: the controller broke its transport binding: a response
	// for no outstanding command, a response capsule of the wrong size, a
	// remote invalidation of a key the command did not offer (RDMA), a
	// malformed PDU or ICResp (TCP), a malformed Connect answer. The host
	// drops the connection.
	ErrProtocol = errors.New("nvmeof/host: protocol violation by the controller")
	// ErrNamespaceChanged: after a reconnect the namespace reported a
	// different size or format; its requests fail rather than land at the
	// wrong place.
	ErrNamespaceChanged = errors.New("nvmeof/host: namespace changed across a reconnect")
	// ErrNoPath: a Multipath request found no usable path (every
	// controller lost, or the namespace Inaccessible, in Persistent Loss
	// or in Change through every one) for the controller-loss timeout,
	// or at once with FailFast; the error wraps the last path's. Also
	// Multipath.Namespace with no path up.
	ErrNoPath = errors.New("nvmeof/host: no usable path to the namespace")
)

// Errors of a request.
var (
	// ErrUnaligned: a write, write-zeroes or discard does not start and end
	// on a logical block boundary.
	ErrUnaligned = errors.New("nvmeof/host: offset or length not a multiple of the block size")
	// ErrOutOfRange: the request reaches past the end of the namespace, or
	// starts before 0.
	ErrOutOfRange = errors.New("nvmeof/host: request outside the namespace")
	// ErrRequestBusy: Submit was given a Request that is still in flight.
	ErrRequestBusy = errors.New("nvmeof/host: request already in flight")
	// ErrInvalidRequest: a Request with an unknown Op, a nil Buf where data
	// is needed, or a Length where none is.
	ErrInvalidRequest = errors.New("nvmeof/host: invalid request")
)

// ConnectError is a Fabrics Connect command that the controller answered
// with an error status: for example Connect Invalid Host (SCT 1h, SC 84h)
// from a subsystem whose allow-list does not name the host NQN.
// errors.Is(err, nvmeof.StatusConnectInvalidHost) finds it.
type ConnectError struct {
	// QID is the queue the Connect was for (0 is the admin queue).
	QID uint16
	// SubNQN and HostNQN are the names the Connect carried.
	SubNQN, HostNQN string
	// Status is the Connect response's status.
	Status nvmeof.Status
	// Param locates the refused field when Status is Connect Invalid
	// Parameters.
	Param nvmeof.InvalidParameter
}

func (e *ConnectError) Error() string {
	s := fmt.Sprintf("nvmeof/host: Connect of queue %d to %s as %s refused: %v", e.QID, e.SubNQN, e.HostNQN, e.Status)
	if errors.Is(e.Status, nvmeof.StatusConnectInvalidParameters) {
		where := "command"
		if e.Param.InData {
			where = "data"
		}
		s += fmt.Sprintf(" (field at byte %d of the %s)", e.Param.Offset, where)
	}
	return s
}

// Unwrap returns the status, so errors.Is matches nvmeof status values.
func (e *ConnectError) Unwrap() error { return e.Status }

// ControllerCheckError is a controller that failed one of the checks a
// host makes before it uses it (the Identify Controller fields a Linux
// host checks, CSTS.RDY after enabling, the queue count it granted).
type ControllerCheckError struct {
	// Field names what failed, as the specification spells it ("CNTLID",
	// "KAS", "IOCCSZ", "SGLS").
	Field string
	// Problem says what was wrong with it.
	Problem string
}

func (e *ControllerCheckError) Error() string {
	return fmt.Sprintf("nvmeof/host: incompatible controller: %s: %s", e.Field, e.Problem)
}

// Unwrap returns ErrIncompatibleController.
func (e *ControllerCheckError) Unwrap() error { return ErrIncompatibleController }

// CommandError is an NVMe command that completed with an error status.
// errors.Is(err, nvmeof.StatusLBAOutOfRange) and friends find the status.
type CommandError struct {
	// QID is the queue the command ran on.
	QID uint16
	// Opcode and NSID identify the command; SLBA and Blocks its range
	// (zero for commands without one).
	Opcode nvmeof.Opcode
	NSID   uint32
	SLBA   uint64
	Blocks uint32
	Status nvmeof.Status
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("nvmeof/host: queue %d opcode %02Xh nsid %d lba %d+%d: %v",
		e.QID, uint8(e.Opcode), e.NSID, e.SLBA, e.Blocks, e.Status)
}

// Unwrap returns the status.
func (e *CommandError) Unwrap() error { return e.Status }

// lostError wraps cause as ErrControllerLost.
func lostError(cause error) error {
	if cause == nil {
		return ErrControllerLost
	}
	if errors.Is(cause, ErrControllerLost) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrControllerLost, cause)
}
