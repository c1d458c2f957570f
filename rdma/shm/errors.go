package shm

import (
	"errors"
	"fmt"

	"github.com/capsule-storage/capsule/rdma"
)

// Errors of the shared-memory formats: a peer wrote something that is not
// a valid ring entry, key-table entry, control message or QP block. The
// QP that read it goes to StateError (RemInvReqErr); other QPs are not
// affected.
var (
	// ErrShortBuffer: fewer bytes than the format's fixed header.
	ErrShortBuffer = errors.New("shm: buffer too short")
	// ErrBadEntry: a ring entry header is invalid (unknown type, reserved
	// bits set, a length that does not fit).
	ErrBadEntry = errors.New("shm: invalid ring entry")
	// ErrBadStream: valid entries in an invalid order (a fragment of an
	// unknown message, a sequence number out of order, lengths that do not
	// add up).
	ErrBadStream = errors.New("shm: invalid ring entry sequence")
	// ErrBadRing: the ring's producer index is impossible (ahead of the
	// consumer by more than the ring, or misaligned).
	ErrBadRing = errors.New("shm: invalid ring index")
	// ErrBadKeyEntry: a key-table entry is invalid.
	ErrBadKeyEntry = errors.New("shm: invalid key-table entry")
	// ErrBadTable: a key table or QP block does not have the expected
	// header or size.
	ErrBadTable = errors.New("shm: invalid shared table")
	// ErrBadMessage: a control message is invalid.
	ErrBadMessage = errors.New("shm: invalid control message")
)

// Errors of setup.
var (
	// ErrPDInUse: PD.Close was called while regions or queue pairs of the
	// PD were still open.
	ErrPDInUse = fmt.Errorf("%w: shm: PD still has regions or queue pairs", rdma.ErrInvalidArgument)
	// ErrKeyTableFull: the PD has as many live regions as its key table
	// holds (KeyTableCapacity).
	ErrKeyTableFull = fmt.Errorf("%w: shm: key table full", rdma.ErrInvalidArgument)
	// ErrBadName: a listener or connection name is empty, too long, or
	// holds a '/' or NUL.
	ErrBadName = fmt.Errorf("%w: shm: bad endpoint name", rdma.ErrInvalidArgument)
	// ErrPeerTimeout: the peer did not answer a control request (a region
	// fetch) in time.
	ErrPeerTimeout = errors.New("shm: peer did not answer")
)
