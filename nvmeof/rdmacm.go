package nvmeof

import (
	"errors"
	"fmt"
)

// Sizes of the RDMA_CM private data defined by the NVMe RDMA Transport
// Specification 1.0 (the RDMA_CM_REQUEST, RDMA_CM_ACCEPT and
// RDMA_CM_REJECT private data formats; NVMe over Fabrics 1.1 had them in
// its RDMA transport binding).
const (
	RDMACMRequestSize = 32
	RDMACMAcceptSize  = 32
	RDMACMRejectSize  = 4
)

// Byte offsets of the RDMA_CM private data fields.
const (
	RDMACMOffsetRECFMT  = 0 // Record Format, all three messages
	RDMACMOffsetQID     = 2 // request: Queue ID
	RDMACMOffsetHRQSIZE = 4 // request: Host Receive Queue Size
	RDMACMOffsetHSQSIZE = 6 // request: Host Send Queue Size, 0's based
	RDMACMOffsetCNTLID  = 8 // request: Controller ID (I/O queues)
	RDMACMOffsetCRQSIZE = 2 // accept: Controller Receive Queue Size
	RDMACMOffsetSTS     = 2 // reject: Status
)

// RDMACMStatus is the STS field of an RDMA_CM_REJECT private data: why a
// controller refused an RDMA connection for an NVMe queue. It implements
// error; the zero value means no refusal.
type RDMACMStatus uint16

// RDMA_CM reject statuses.
const (
	RDMACMInvalidPrivateDataLength RDMACMStatus = 0x01
	RDMACMInvalidRECFMT            RDMACMStatus = 0x02
	RDMACMInvalidQID               RDMACMStatus = 0x03
	RDMACMInvalidHSQSIZE           RDMACMStatus = 0x04
	RDMACMInvalidHRQSIZE           RDMACMStatus = 0x05
	RDMACMNoResources              RDMACMStatus = 0x06
	RDMACMInvalidIRD               RDMACMStatus = 0x07
	RDMACMInvalidORD               RDMACMStatus = 0x08
	RDMACMInvalidCNTLID            RDMACMStatus = 0x09
)

var rdmacmStatusNames = [...]string{
	RDMACMInvalidPrivateDataLength: "invalid private data length",
	RDMACMInvalidRECFMT:            "invalid RECFMT",
	RDMACMInvalidQID:               "invalid QID",
	RDMACMInvalidHSQSIZE:           "invalid HSQSIZE",
	RDMACMInvalidHRQSIZE:           "invalid HRQSIZE",
	RDMACMNoResources:              "no resources",
	RDMACMInvalidIRD:               "invalid IRD",
	RDMACMInvalidORD:               "invalid ORD",
	RDMACMInvalidCNTLID:            "invalid CNTLID",
}

func (s RDMACMStatus) String() string {
	if int(s) < len(rdmacmStatusNames) && rdmacmStatusNames[s] != "" {
		return rdmacmStatusNames[s]
	}
	return fmt.Sprintf("RDMA_CM status %#x", uint16(s))
}

// Error makes a status usable as an error.
func (s RDMACMStatus) Error() string { return "nvmeof: RDMA_CM reject: " + s.String() }

// RDMACMStatusOf returns the reject status found in err's chain, or
// RDMACMNoResources if there is none (and 0 for a nil err).
func RDMACMStatusOf(err error) RDMACMStatus {
	if err == nil {
		return 0
	}
	var s RDMACMStatus
	if errors.As(err, &s) {
		return s
	}
	return RDMACMNoResources
}

// RDMACMRequest is the private data of an RDMA_CM_REQUEST: the host asks
// for a queue.
type RDMACMRequest struct {
	RecFmt uint16
	// QID is the queue the connection carries: 0 for the admin queue.
	QID uint16
	// HRQSize is the number of receive queue entries the host posts for
	// responses (1's based).
	HRQSize uint16
	// HSQSize is the size of the host's submission queue, 0's based, as
	// SQSIZE of the Connect command that follows.
	HSQSize uint16
	// CNTLID is the controller of an I/O queue (reserved for the admin queue).
	CNTLID uint16
}

// MarshalTo writes the 32 bytes of request private data into b.
func (r *RDMACMRequest) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("RDMA_CM request", b, RDMACMRequestSize); err != nil {
		return 0, err
	}
	b = b[:RDMACMRequestSize]
	clear(b)
	le.PutUint16(b[RDMACMOffsetRECFMT:], r.RecFmt)
	le.PutUint16(b[RDMACMOffsetQID:], r.QID)
	le.PutUint16(b[RDMACMOffsetHRQSIZE:], r.HRQSize)
	le.PutUint16(b[RDMACMOffsetHSQSIZE:], r.HSQSize)
	le.PutUint16(b[RDMACMOffsetCNTLID:], r.CNTLID)
	return RDMACMRequestSize, nil
}

// MarshalBinary returns the 32 bytes of request private data.
func (r *RDMACMRequest) MarshalBinary() ([]byte, error) {
	b := make([]byte, RDMACMRequestSize)
	_, err := r.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes request private data. The connection manager
// may deliver more bytes than were sent (InfiniBand CM messages carry
// fixed-size, zero-padded private data), so b must hold at least 32
// bytes and what follows them is ignored. Errors wrap the RDMACMStatus to
// reject the connection with: Invalid Private Data Length for fewer than
// 32 bytes, Invalid RECFMT for a record format other than 0.
func (r *RDMACMRequest) UnmarshalBinary(b []byte) error {
	if len(b) < RDMACMRequestSize {
		return fmt.Errorf("nvmeof: RDMA_CM request: %d bytes of private data, want %d: %w: %w",
			len(b), RDMACMRequestSize, ErrShortBuffer, RDMACMInvalidPrivateDataLength)
	}
	x := RDMACMRequest{
		RecFmt:  le.Uint16(b[RDMACMOffsetRECFMT:]),
		QID:     le.Uint16(b[RDMACMOffsetQID:]),
		HRQSize: le.Uint16(b[RDMACMOffsetHRQSIZE:]),
		HSQSize: le.Uint16(b[RDMACMOffsetHSQSIZE:]),
		CNTLID:  le.Uint16(b[RDMACMOffsetCNTLID:]),
	}
	if x.RecFmt != 0 {
		return fmt.Errorf("nvmeof: RDMA_CM request: RECFMT %d: %w: %w", x.RecFmt, ErrFieldValue, RDMACMInvalidRECFMT)
	}
	*r = x
	return nil
}

// CheckQueueSizes returns the reject status for queue sizes a controller
// that allows at most maxEntries entries per queue cannot serve: an
// HSQSIZE of 0 (a one-entry queue) or above maxEntries-1 is Invalid
// HSQSIZE, an HRQSIZE of 0 or above maxEntries is Invalid HRQSIZE. It
// returns 0 when the sizes are acceptable.
func (r *RDMACMRequest) CheckQueueSizes(maxEntries int) RDMACMStatus {
	if r.HSQSize == 0 || int(r.HSQSize)+1 > maxEntries {
		return RDMACMInvalidHSQSIZE
	}
	if r.HRQSize == 0 || int(r.HRQSize) > maxEntries {
		return RDMACMInvalidHRQSIZE
	}
	return 0
}

// RDMACMAccept is the private data of an RDMA_CM_ACCEPT.
type RDMACMAccept struct {
	RecFmt uint16
	// CRQSize is the number of receive queue entries the controller
	// posts for commands.
	CRQSize uint16
}

// MarshalTo writes the 32 bytes of accept private data into b.
func (a *RDMACMAccept) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("RDMA_CM accept", b, RDMACMAcceptSize); err != nil {
		return 0, err
	}
	b = b[:RDMACMAcceptSize]
	clear(b)
	le.PutUint16(b[RDMACMOffsetRECFMT:], a.RecFmt)
	le.PutUint16(b[RDMACMOffsetCRQSIZE:], a.CRQSize)
	return RDMACMAcceptSize, nil
}

// MarshalBinary returns the 32 bytes of accept private data.
func (a *RDMACMAccept) MarshalBinary() ([]byte, error) {
	b := make([]byte, RDMACMAcceptSize)
	_, err := a.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes accept private data: at least 32 bytes (more
// may be padding from the connection manager), record format 0.
func (a *RDMACMAccept) UnmarshalBinary(b []byte) error {
	if err := needAtLeast("RDMA_CM accept", b, RDMACMAcceptSize); err != nil {
		return err
	}
	x := RDMACMAccept{RecFmt: le.Uint16(b[RDMACMOffsetRECFMT:]), CRQSize: le.Uint16(b[RDMACMOffsetCRQSIZE:])}
	if x.RecFmt != 0 {
		return &FieldError{Structure: "RDMA_CM accept", Field: "RECFMT", Offset: RDMACMOffsetRECFMT, Err: ErrFieldValue}
	}
	*a = x
	return nil
}

// RDMACMReject is the private data of an RDMA_CM_REJECT.
type RDMACMReject struct {
	RecFmt uint16
	Status RDMACMStatus
}

// MarshalTo writes the 4 bytes of reject private data into b.
func (j *RDMACMReject) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("RDMA_CM reject", b, RDMACMRejectSize); err != nil {
		return 0, err
	}
	le.PutUint16(b[RDMACMOffsetRECFMT:], j.RecFmt)
	le.PutUint16(b[RDMACMOffsetSTS:], uint16(j.Status))
	return RDMACMRejectSize, nil
}

// MarshalBinary returns the 4 bytes of reject private data.
func (j *RDMACMReject) MarshalBinary() ([]byte, error) {
	b := make([]byte, RDMACMRejectSize)
	_, err := j.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes reject private data: at least 4 bytes (more may
// be padding from the connection manager), record format 0.
func (j *RDMACMReject) UnmarshalBinary(b []byte) error {
	if err := needAtLeast("RDMA_CM reject", b, RDMACMRejectSize); err != nil {
		return err
	}
	x := RDMACMReject{RecFmt: le.Uint16(b[RDMACMOffsetRECFMT:]), Status: RDMACMStatus(le.Uint16(b[RDMACMOffsetSTS:]))}
	if x.RecFmt != 0 {
		return &FieldError{Structure: "RDMA_CM reject", Field: "RECFMT", Offset: RDMACMOffsetRECFMT, Err: ErrFieldValue}
	}
	*j = x
	return nil
}
