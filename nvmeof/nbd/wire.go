package nbd

import (
	"encoding/binary"
	"fmt"
)

// Magic numbers of the protocol (doc/proto.md of the NBD project).
const (
	// MagicNBD opens the server's greeting: ASCII "NBDMAGIC".
	MagicNBD uint64 = 0x4e42444d41474943
	// MagicOption follows it in the newstyle greeting and opens every
	// option the client sends: ASCII "IHAVEOPT".
	MagicOption uint64 = 0x49484156454f5054
	// MagicOptionReply opens every option reply of fixed newstyle.
	MagicOptionReply uint64 = 0x0003e889045565a9
	// MagicRequest opens every transmission request.
	MagicRequest uint32 = 0x25609513
	// MagicSimpleReply opens a simple reply.
	MagicSimpleReply uint32 = 0x67446698
	// MagicStructuredReply opens a structured reply chunk.
	MagicStructuredReply uint32 = 0x668e33ef
)

// Handshake flags (server, 16 bits) and client flags (32 bits).
const (
	FlagFixedNewstyle uint16 = 1 << 0
	FlagNoZeroes      uint16 = 1 << 1

	ClientFlagFixedNewstyle uint32 = 1 << 0
	ClientFlagNoZeroes      uint32 = 1 << 1
)

// Transmission flags (16 bits).
const (
	FlagHasFlags        uint16 = 1 << 0
	FlagReadOnly        uint16 = 1 << 1
	FlagSendFlush       uint16 = 1 << 2
	FlagSendFUA         uint16 = 1 << 3
	FlagRotational      uint16 = 1 << 4
	FlagSendTrim        uint16 = 1 << 5
	FlagSendWriteZeroes uint16 = 1 << 6
	FlagSendDF          uint16 = 1 << 7
	FlagCanMultiConn    uint16 = 1 << 8
	FlagSendCache       uint16 = 1 << 10
	FlagSendFastZero    uint16 = 1 << 11
)

// Option is an option type of the handshake.
type Option uint32

// Options.
const (
	OptExportName      Option = 1
	OptAbort           Option = 2
	OptList            Option = 3
	OptStartTLS        Option = 5
	OptInfo            Option = 6
	OptGo              Option = 7
	OptStructuredReply Option = 8
	OptListMetaContext Option = 9
	OptSetMetaContext  Option = 10
)

func (o Option) String() string {
	switch o {
	case OptExportName:
		return "NBD_OPT_EXPORT_NAME"
	case OptAbort:
		return "NBD_OPT_ABORT"
	case OptList:
		return "NBD_OPT_LIST"
	case OptStartTLS:
		return "NBD_OPT_STARTTLS"
	case OptInfo:
		return "NBD_OPT_INFO"
	case OptGo:
		return "NBD_OPT_GO"
	case OptStructuredReply:
		return "NBD_OPT_STRUCTURED_REPLY"
	case OptListMetaContext:
		return "NBD_OPT_LIST_META_CONTEXT"
	case OptSetMetaContext:
		return "NBD_OPT_SET_META_CONTEXT"
	}
	return fmt.Sprintf("NBD_OPT(%d)", uint32(o))
}

// Reply types of option replies; errors have bit 31 set.
const (
	RepAck         uint32 = 1
	RepServer      uint32 = 2
	RepInfo        uint32 = 3
	RepErrUnsup    uint32 = 1<<31 + 1
	RepErrPolicy   uint32 = 1<<31 + 2
	RepErrInvalid  uint32 = 1<<31 + 3
	RepErrPlatform uint32 = 1<<31 + 4
	RepErrTLSReqd  uint32 = 1<<31 + 5
	RepErrUnknown  uint32 = 1<<31 + 6
	RepErrShutdown uint32 = 1<<31 + 7
	RepErrTooBig   uint32 = 1<<31 + 9
)

// Information types of NBD_REP_INFO.
const (
	InfoExport      uint16 = 0
	InfoName        uint16 = 1
	InfoDescription uint16 = 2
	InfoBlockSize   uint16 = 3
)

// Command is a request type of the transmission phase.
type Command uint16

// Commands.
const (
	CmdRead        Command = 0
	CmdWrite       Command = 1
	CmdDisc        Command = 2
	CmdFlush       Command = 3
	CmdTrim        Command = 4
	CmdCache       Command = 5
	CmdWriteZeroes Command = 6
	CmdBlockStatus Command = 7
)

func (c Command) String() string {
	switch c {
	case CmdRead:
		return "NBD_CMD_READ"
	case CmdWrite:
		return "NBD_CMD_WRITE"
	case CmdDisc:
		return "NBD_CMD_DISC"
	case CmdFlush:
		return "NBD_CMD_FLUSH"
	case CmdTrim:
		return "NBD_CMD_TRIM"
	case CmdCache:
		return "NBD_CMD_CACHE"
	case CmdWriteZeroes:
		return "NBD_CMD_WRITE_ZEROES"
	case CmdBlockStatus:
		return "NBD_CMD_BLOCK_STATUS"
	}
	return fmt.Sprintf("NBD_CMD(%d)", uint16(c))
}

// Command flags.
const (
	CmdFlagFUA      uint16 = 1 << 0
	CmdFlagNoHole   uint16 = 1 << 1
	CmdFlagDF       uint16 = 1 << 2
	CmdFlagReqOne   uint16 = 1 << 3
	CmdFlagFastZero uint16 = 1 << 4
)

// Structured reply flags and chunk types.
const (
	ReplyFlagDone uint16 = 1 << 0

	ReplyTypeNone        uint16 = 0
	ReplyTypeOffsetData  uint16 = 1
	ReplyTypeOffsetHole  uint16 = 2
	ReplyTypeError       uint16 = 1<<15 + 1
	ReplyTypeErrorOffset uint16 = 1<<15 + 2
)

// Sizes of the fixed parts of messages.
const (
	// GreetingSize: NBDMAGIC, IHAVEOPT, handshake flags.
	GreetingSize = 18
	// OptionHeaderSize: IHAVEOPT, option, length.
	OptionHeaderSize = 16
	// OptionReplyHeaderSize: magic, option, reply type, length.
	OptionReplyHeaderSize = 20
	// RequestSize: magic, flags, type, cookie, offset, length.
	RequestSize = 28
	// SimpleReplySize: magic, error, cookie.
	SimpleReplySize = 16
	// StructuredReplyHeaderSize: magic, flags, type, cookie, length.
	StructuredReplyHeaderSize = 20
	// ExportNameReplySize is the reply to NBD_OPT_EXPORT_NAME without the
	// 124 zero bytes: size and transmission flags.
	ExportNameReplySize = 10
	// ExportNameZeroes is the padding after it unless NO_ZEROES was agreed.
	ExportNameZeroes = 124
)

// Offsets in a request.
const (
	reqMagic  = 0
	reqFlags  = 4
	reqType   = 6
	reqCookie = 8
	reqOffset = 16
	reqLength = 24
)

// Request is a transmission request header. A write's payload of Length
// bytes follows it on the wire.
type Request struct {
	Flags  uint16
	Type   Command
	Cookie uint64
	Offset uint64
	Length uint32
}

// UnmarshalBinary decodes a request header of exactly RequestSize bytes.
// A wrong magic is ErrBadMagic: the stream cannot be trusted past it.
// Fields are not checked against an export here (see Conn).
func (r *Request) UnmarshalBinary(b []byte) error {
	if len(b) != RequestSize {
		return fmt.Errorf("%w: request of %d bytes, want %d", ErrLength, len(b), RequestSize)
	}
	if m := binary.BigEndian.Uint32(b[reqMagic:]); m != MagicRequest {
		return fmt.Errorf("%w: request magic %#08x", ErrBadMagic, m)
	}
	r.Flags = binary.BigEndian.Uint16(b[reqFlags:])
	r.Type = Command(binary.BigEndian.Uint16(b[reqType:]))
	r.Cookie = binary.BigEndian.Uint64(b[reqCookie:])
	r.Offset = binary.BigEndian.Uint64(b[reqOffset:])
	r.Length = binary.BigEndian.Uint32(b[reqLength:])
	return nil
}

// MarshalTo writes the header into b (at least RequestSize bytes).
func (r *Request) MarshalTo(b []byte) (int, error) {
	if len(b) < RequestSize {
		return 0, fmt.Errorf("%w: %d bytes for a request", ErrShortBuffer, len(b))
	}
	binary.BigEndian.PutUint32(b[reqMagic:], MagicRequest)
	binary.BigEndian.PutUint16(b[reqFlags:], r.Flags)
	binary.BigEndian.PutUint16(b[reqType:], uint16(r.Type))
	binary.BigEndian.PutUint64(b[reqCookie:], r.Cookie)
	binary.BigEndian.PutUint64(b[reqOffset:], r.Offset)
	binary.BigEndian.PutUint32(b[reqLength:], r.Length)
	return RequestSize, nil
}

// MarshalBinary encodes the header.
func (r *Request) MarshalBinary() ([]byte, error) {
	b := make([]byte, RequestSize)
	_, err := r.MarshalTo(b)
	return b, err
}

// putSimpleReply writes a simple reply header into b[:SimpleReplySize].
func putSimpleReply(b []byte, errno Errno, cookie uint64) {
	binary.BigEndian.PutUint32(b[0:], MagicSimpleReply)
	binary.BigEndian.PutUint32(b[4:], uint32(errno))
	binary.BigEndian.PutUint64(b[8:], cookie)
}

// putChunkHeader writes a structured reply chunk header into
// b[:StructuredReplyHeaderSize].
func putChunkHeader(b []byte, flags, typ uint16, cookie uint64, length uint32) {
	binary.BigEndian.PutUint32(b[0:], MagicStructuredReply)
	binary.BigEndian.PutUint16(b[4:], flags)
	binary.BigEndian.PutUint16(b[6:], typ)
	binary.BigEndian.PutUint64(b[8:], cookie)
	binary.BigEndian.PutUint32(b[16:], length)
}

// OptionHeader is the header of an option the client sends in the
// handshake; Length bytes of data follow.
type OptionHeader struct {
	Option Option
	Length uint32
}

// UnmarshalBinary decodes an option header of exactly OptionHeaderSize
// bytes; the magic must be IHAVEOPT.
func (h *OptionHeader) UnmarshalBinary(b []byte) error {
	if len(b) != OptionHeaderSize {
		return fmt.Errorf("%w: option header of %d bytes, want %d", ErrLength, len(b), OptionHeaderSize)
	}
	if m := binary.BigEndian.Uint64(b); m != MagicOption {
		return fmt.Errorf("%w: option magic %#016x", ErrBadMagic, m)
	}
	h.Option = Option(binary.BigEndian.Uint32(b[8:]))
	h.Length = binary.BigEndian.Uint32(b[12:])
	return nil
}

// MarshalBinary encodes the header.
func (h *OptionHeader) MarshalBinary() ([]byte, error) {
	b := make([]byte, OptionHeaderSize)
	binary.BigEndian.PutUint64(b, MagicOption)
	binary.BigEndian.PutUint32(b[8:], uint32(h.Option))
	binary.BigEndian.PutUint32(b[12:], h.Length)
	return b, nil
}

// appendOptionReply appends an option reply with its data.
func appendOptionReply(b []byte, opt Option, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, MagicOptionReply)
	b = binary.BigEndian.AppendUint32(b, uint32(opt))
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// InfoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO: an export name
// and the information types the client asks for.
type InfoRequest struct {
	Name  string
	Infos []uint16
}

// MaxNameLength bounds export names, as the protocol bounds strings.
const MaxNameLength = 4096

// UnmarshalBinary decodes the option data. The name length must leave
// room for the count, and the count must match the bytes that remain.
func (q *InfoRequest) UnmarshalBinary(b []byte) error {
	if len(b) < 6 {
		return fmt.Errorf("%w: %d bytes of info request, at least 6", ErrLength, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-6) {
		return fmt.Errorf("%w: name of %d bytes in %d bytes of info request", ErrLength, n, len(b))
	}
	if n > MaxNameLength {
		return fmt.Errorf("%w: name of %d bytes", ErrLength, n)
	}
	rest := b[4+n:]
	count := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != 2*count {
		return fmt.Errorf("%w: %d information requests in %d bytes", ErrLength, count, len(rest))
	}
	q.Name = string(b[4 : 4+n])
	q.Infos = q.Infos[:0]
	for i := range count {
		q.Infos = append(q.Infos, binary.BigEndian.Uint16(rest[2*i:]))
	}
	return nil
}

// MarshalBinary encodes the option data.
func (q *InfoRequest) MarshalBinary() ([]byte, error) {
	if len(q.Name) > MaxNameLength || len(q.Infos) > 0xffff {
		return nil, fmt.Errorf("%w: name of %d bytes, %d information requests", ErrLength, len(q.Name), len(q.Infos))
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(q.Name)))
	b = append(b, q.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(q.Infos)))
	for _, i := range q.Infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b, nil
}
