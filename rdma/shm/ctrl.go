package shm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// Control messages travel over the connection's SOCK_SEQPACKET Unix
// socket, one message per datagram, with file descriptors attached as
// SCM_RIGHTS where noted. An 8-byte header precedes the body; fields are
// little-endian.
//
// Header:
//
//	off size field
//	  0    1 type     ctlConnReq, ctlAccept, ctlReject, ctlFetchReq, ctlFetchReply
//	  1    1 version  1
//	  2    2 reserved zero
//	  4    4 bodylen  bytes after the header; must be the rest of the datagram
//
// ConnReq (fds: the dialer's key table, the QP block) and Accept (fd: the
// acceptor's key table) carry a hello body:
//
//	off size field
//	  0    8 pdid     the sender's PD, names its key table
//	  8    4 qpnum    the sender's QP number
//	 12    4 pid      the sender's process id
//	 16    4 ringsize bytes of each ring in the QP block (0 in an Accept)
//	 20    4 rnrretry the sender's QPConfig.RNRRetry
//	 24    8 rnrtime  the sender's QPConfig.RNRTimeout in nanoseconds
//	 32    4 privlen  private data bytes, at most rdma.MaxPrivateData
//	 36    n private
//
// Reject (no fds):
//
//	0    4 privlen
//	4    n private
//
// FetchReq (no fds) asks for the memfd of the region whose key is key:
//
//	0    4 seq      echoed in the reply
//	4    4 key
//	8    8 serial   the serial the key table shows for key
//
// FetchReply (fd: the region's memfd when status is 0):
//
//	 0    4 seq
//	 4    4 status   0 ok, 1 no such region
//	 8    8 serial
//	16    8 size     the memfd's size
const (
	ctlOffType    = 0
	ctlOffVersion = 1
	ctlOffRsvd    = 2
	ctlOffBodyLen = 4
	ctlHdrLen     = 8

	helloOffPDID       = 0
	helloOffQPNum      = 8
	helloOffPID        = 12
	helloOffRingSize   = 16
	helloOffRNRRetry   = 20
	helloOffRNRTimeout = 24
	helloOffPrivLen    = 32
	helloLen           = 36

	rejOffPrivLen = 0
	rejLen        = 4

	fetchOffSeq    = 0
	fetchOffKey    = 4
	fetchOffSerial = 8
	fetchReqLen    = 16

	replyOffSeq    = 0
	replyOffStatus = 4
	replyOffSerial = 8
	replyOffSize   = 16
	fetchReplyLen  = 24

	ctlVersion = 1

	// ctlMaxLen is the largest control message.
	ctlMaxLen = ctlHdrLen + helloLen + rdma.MaxPrivateData
)

type ctlType uint8

const (
	ctlConnReq    ctlType = 1
	ctlAccept     ctlType = 2
	ctlReject     ctlType = 3
	ctlFetchReq   ctlType = 4
	ctlFetchReply ctlType = 5
)

// ctlMsg is a decoded control message; which fields mean something
// depends on Type.
type ctlMsg struct {
	Type ctlType

	// hello (ConnReq, Accept)
	PDID       uint64
	QPNum      uint32
	PID        uint32
	RingSize   uint32
	RNRRetry   uint32
	RNRTimeout time.Duration

	// ConnReq, Accept, Reject. Decoding aliases the input.
	Private []byte

	// FetchReq, FetchReply
	Seq    uint32
	Key    uint32
	Status uint32
	Serial uint64
	Size   uint64
}

// bodyLen is the encoded body length of m.
func (m *ctlMsg) bodyLen() (int, error) {
	switch m.Type {
	case ctlConnReq, ctlAccept:
		if len(m.Private) > rdma.MaxPrivateData {
			return 0, fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(m.Private))
		}
		return helloLen + len(m.Private), nil
	case ctlReject:
		if len(m.Private) > rdma.MaxPrivateData {
			return 0, fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(m.Private))
		}
		return rejLen + len(m.Private), nil
	case ctlFetchReq:
		return fetchReqLen, nil
	case ctlFetchReply:
		return fetchReplyLen, nil
	}
	return 0, fmt.Errorf("%w: unknown control message type %d", rdma.ErrInvalidArgument, m.Type)
}

// marshalInto encodes m into b and returns the bytes used. It allocates
// nothing; b should be ctlMaxLen bytes.
func (m *ctlMsg) marshalInto(b []byte) (int, error) {
	n, err := m.bodyLen()
	if err != nil {
		return 0, err
	}
	if len(b) < ctlHdrLen+n {
		return 0, fmt.Errorf("%w: control message needs %d bytes, have %d", ErrShortBuffer, ctlHdrLen+n, len(b))
	}
	b[ctlOffType] = byte(m.Type)
	b[ctlOffVersion] = ctlVersion
	binary.LittleEndian.PutUint16(b[ctlOffRsvd:], 0)
	binary.LittleEndian.PutUint32(b[ctlOffBodyLen:], uint32(n))
	p := b[ctlHdrLen : ctlHdrLen+n]
	switch m.Type {
	case ctlConnReq, ctlAccept:
		binary.LittleEndian.PutUint64(p[helloOffPDID:], m.PDID)
		binary.LittleEndian.PutUint32(p[helloOffQPNum:], m.QPNum)
		binary.LittleEndian.PutUint32(p[helloOffPID:], m.PID)
		binary.LittleEndian.PutUint32(p[helloOffRingSize:], m.RingSize)
		binary.LittleEndian.PutUint32(p[helloOffRNRRetry:], m.RNRRetry)
		binary.LittleEndian.PutUint64(p[helloOffRNRTimeout:], uint64(m.RNRTimeout))
		binary.LittleEndian.PutUint32(p[helloOffPrivLen:], uint32(len(m.Private)))
		copy(p[helloLen:], m.Private)
	case ctlReject:
		binary.LittleEndian.PutUint32(p[rejOffPrivLen:], uint32(len(m.Private)))
		copy(p[rejLen:], m.Private)
	case ctlFetchReq:
		binary.LittleEndian.PutUint32(p[fetchOffSeq:], m.Seq)
		binary.LittleEndian.PutUint32(p[fetchOffKey:], m.Key)
		binary.LittleEndian.PutUint64(p[fetchOffSerial:], m.Serial)
	case ctlFetchReply:
		binary.LittleEndian.PutUint32(p[replyOffSeq:], m.Seq)
		binary.LittleEndian.PutUint32(p[replyOffStatus:], m.Status)
		binary.LittleEndian.PutUint64(p[replyOffSerial:], m.Serial)
		binary.LittleEndian.PutUint64(p[replyOffSize:], m.Size)
	}
	return ctlHdrLen + n, nil
}

// decodeCtlMsg decodes and checks one control message datagram. Private
// aliases b.
func decodeCtlMsg(b []byte) (ctlMsg, error) {
	if len(b) < ctlHdrLen {
		return ctlMsg{}, fmt.Errorf("%w: control message of %d bytes", ErrShortBuffer, len(b))
	}
	m := ctlMsg{Type: ctlType(b[ctlOffType])}
	n := binary.LittleEndian.Uint32(b[ctlOffBodyLen:])
	switch {
	case b[ctlOffVersion] != ctlVersion:
		return ctlMsg{}, fmt.Errorf("%w: version %d", ErrBadMessage, b[ctlOffVersion])
	case binary.LittleEndian.Uint16(b[ctlOffRsvd:]) != 0:
		return ctlMsg{}, fmt.Errorf("%w: reserved bytes set", ErrBadMessage)
	case uint64(n) != uint64(len(b)-ctlHdrLen):
		return ctlMsg{}, fmt.Errorf("%w: body length %d in a datagram of %d", ErrBadMessage, n, len(b))
	}
	p := b[ctlHdrLen:]
	switch m.Type {
	case ctlConnReq, ctlAccept:
		if len(p) < helloLen {
			return ctlMsg{}, fmt.Errorf("%w: hello of %d bytes", ErrBadMessage, len(p))
		}
		m.PDID = binary.LittleEndian.Uint64(p[helloOffPDID:])
		m.QPNum = binary.LittleEndian.Uint32(p[helloOffQPNum:])
		m.PID = binary.LittleEndian.Uint32(p[helloOffPID:])
		m.RingSize = binary.LittleEndian.Uint32(p[helloOffRingSize:])
		m.RNRRetry = binary.LittleEndian.Uint32(p[helloOffRNRRetry:])
		rt := binary.LittleEndian.Uint64(p[helloOffRNRTimeout:])
		pl := binary.LittleEndian.Uint32(p[helloOffPrivLen:])
		if rt > 1<<62 {
			return ctlMsg{}, fmt.Errorf("%w: RNR timeout %d ns", ErrBadMessage, rt)
		}
		if pl > rdma.MaxPrivateData || uint64(pl) != uint64(len(p)-helloLen) {
			return ctlMsg{}, fmt.Errorf("%w: %d bytes of private data in a body of %d", ErrBadMessage, pl, len(p))
		}
		m.RNRTimeout = time.Duration(rt)
		m.Private = p[helloLen:]
	case ctlReject:
		if len(p) < rejLen {
			return ctlMsg{}, fmt.Errorf("%w: reject of %d bytes", ErrBadMessage, len(p))
		}
		pl := binary.LittleEndian.Uint32(p[rejOffPrivLen:])
		if pl > rdma.MaxPrivateData || uint64(pl) != uint64(len(p)-rejLen) {
			return ctlMsg{}, fmt.Errorf("%w: %d bytes of private data in a body of %d", ErrBadMessage, pl, len(p))
		}
		m.Private = p[rejLen:]
	case ctlFetchReq:
		if len(p) != fetchReqLen {
			return ctlMsg{}, fmt.Errorf("%w: fetch request of %d bytes", ErrBadMessage, len(p))
		}
		m.Seq = binary.LittleEndian.Uint32(p[fetchOffSeq:])
		m.Key = binary.LittleEndian.Uint32(p[fetchOffKey:])
		m.Serial = binary.LittleEndian.Uint64(p[fetchOffSerial:])
	case ctlFetchReply:
		if len(p) != fetchReplyLen {
			return ctlMsg{}, fmt.Errorf("%w: fetch reply of %d bytes", ErrBadMessage, len(p))
		}
		m.Seq = binary.LittleEndian.Uint32(p[replyOffSeq:])
		m.Status = binary.LittleEndian.Uint32(p[replyOffStatus:])
		m.Serial = binary.LittleEndian.Uint64(p[replyOffSerial:])
		m.Size = binary.LittleEndian.Uint64(p[replyOffSize:])
		if m.Status > 1 {
			return ctlMsg{}, fmt.Errorf("%w: fetch status %d", ErrBadMessage, m.Status)
		}
	default:
		return ctlMsg{}, fmt.Errorf("%w: unknown type %d", ErrBadMessage, m.Type)
	}
	return m, nil
}
