package nvmeof

import (
	"bytes"
	"fmt"
)

// OpFabrics is the opcode of every Fabrics command; byte 4 (FCTYPE) says
// which one.
const OpFabrics Opcode = 0x7f

// FabricsType is a Fabrics Command Type (FCTYPE), NVMe Base 2.x Figure 574.
// Bits 1:0 are the data transfer direction, as in an opcode.
type FabricsType uint8

// Fabrics command types.
const (
	FabricsPropertySet FabricsType = 0x00
	FabricsConnect     FabricsType = 0x01
	FabricsPropertyGet FabricsType = 0x04
	FabricsAuthSend    FabricsType = 0x05
	FabricsAuthReceive FabricsType = 0x06
	FabricsDisconnect  FabricsType = 0x08
	FabricsVendorFirst FabricsType = 0xc0 // C0h..FFh are vendor specific
)

func (t FabricsType) String() string {
	switch t {
	case FabricsPropertySet:
		return "Property Set"
	case FabricsConnect:
		return "Connect"
	case FabricsPropertyGet:
		return "Property Get"
	case FabricsAuthSend:
		return "Authentication Send"
	case FabricsAuthReceive:
		return "Authentication Receive"
	case FabricsDisconnect:
		return "Disconnect"
	}
	return fmt.Sprintf("FCTYPE %02Xh", uint8(t))
}

// FabricsType returns FCTYPE (byte 4) of a Fabrics command.
func (c *Command) FabricsType() FabricsType { return FabricsType(c.NSID) }

// SetFabricsType makes c a Fabrics command of type t: it sets the opcode
// and FCTYPE and clears reserved bytes 5 to 7.
func (c *Command) SetFabricsType(t FabricsType) {
	c.Opcode = OpFabrics
	c.NSID = uint32(t)
}

// isFabrics checks that c is the Fabrics command t.
func (c *Command) isFabrics(t FabricsType, name string) error {
	if c.Opcode != OpFabrics {
		return &FieldError{Structure: name, Field: "OPC", Offset: CommandOffsetOpcode, Err: ErrWrongCommand}
	}
	if c.FabricsType() != t {
		return &FieldError{Structure: name, Field: "FCTYPE", Offset: CommandOffsetFCTYPE, Err: ErrWrongCommand}
	}
	return nil
}

// Controller IDs with a special meaning (NVMe Base 2.x Figure 27 and 6.3).
const (
	// CNTLIDDynamic asks a subsystem of the dynamic controller model for
	// any controller; discovery log entries of such subsystems carry it.
	CNTLIDDynamic uint16 = 0xffff
	// CNTLIDAnyStatic asks a subsystem of the static controller model for
	// any controller.
	CNTLIDAnyStatic uint16 = 0xfffe
	// MaxCNTLID is the highest controller ID a subsystem may allocate;
	// FFF0h..FFFFh are reserved.
	MaxCNTLID uint16 = 0xffef
)

// Byte offsets of the fields of a Connect command (NVMe Base 2.x Figure 579).
const (
	ConnectOffsetRECFMT = 40 // Record Format
	ConnectOffsetQID    = 42 // Queue ID
	ConnectOffsetSQSIZE = 44 // Submission Queue Size, 0's based
	ConnectOffsetCATTR  = 46 // Connect Attributes
	ConnectOffsetKATO   = 48 // Keep Alive Timeout, milliseconds
)

// ConnectAttributes is the CATTR byte of a Connect command.
type ConnectAttributes uint8

// Connect attributes.
const (
	// ConnectPriorityClassMask is PRIOCLASS, bits 1:0 (weighted round
	// robin with urgent priority class only; 00b for the admin queue).
	ConnectPriorityClassMask ConnectAttributes = 0x03
	// ConnectDisableSQFlowControl (DISSQFC, bit 2): the host asks for SQ
	// flow control to be disabled; a controller that agrees answers with
	// SQHD FFFFh.
	ConnectDisableSQFlowControl ConnectAttributes = 1 << 2
)

// Connect is a Connect command: it creates the admin queue (QID 0, and
// with it the association between host and controller) or an I/O queue.
// Its 1024 bytes of data are a ConnectData.
type Connect struct {
	CID uint16
	// SGL describes the 1024 bytes of Connect data.
	SGL SGLDescriptor
	// RecFmt is the record format; 0 is the only format defined.
	RecFmt uint16
	// QID is 0 for the admin queue, 1..65534 for an I/O queue.
	QID uint16
	// SQSize is the submission queue size, 0's based (SQSIZE): the queue
	// has SQSize+1 entries. 0 is invalid.
	SQSize uint16
	CATTR  ConnectAttributes
	// KATO is the keep alive timeout in milliseconds (admin queue only).
	KATO uint32
}

// QueueEntries returns the number of submission queue entries asked for.
func (x *Connect) QueueEntries() int { return int(x.SQSize) + 1 }

// Command encodes x as a submission queue entry.
func (x *Connect) Command() Command {
	var c Command
	c.SetFabricsType(FabricsConnect)
	c.CID = x.CID
	c.DPTR = x.SGL
	c.CDW10 = uint32(x.RecFmt) | uint32(x.QID)<<16
	c.CDW11 = uint32(x.SQSize) | uint32(x.CATTR)<<16
	c.CDW12 = x.KATO
	return c
}

// ParseConnect decodes a Connect command. It refuses, with a *FieldError
// that carries the status to answer with, a record format other than 0
// (Connect Incompatible Format), and a QID of FFFFh or an SQSIZE of 0
// (Connect Invalid Parameters, whose DW0 the FieldError's
// InvalidParameter gives). Whether the queue may be created (QID in range,
// SQSIZE within CAP.MQES, the admin queue first) is for the controller.
func ParseConnect(c *Command) (Connect, error) {
	const name = "Connect command"
	if err := c.isFabrics(FabricsConnect, name); err != nil {
		return Connect{}, err
	}
	x := Connect{
		CID:    c.CID,
		SGL:    c.DPTR,
		RecFmt: uint16(c.CDW10),
		QID:    uint16(c.CDW10 >> 16),
		SQSize: uint16(c.CDW11),
		CATTR:  ConnectAttributes(c.CDW11 >> 16),
		KATO:   c.CDW12,
	}
	if x.RecFmt != 0 {
		return x, &FieldError{Structure: name, Field: "RECFMT", Offset: ConnectOffsetRECFMT,
			Status: StatusConnectIncompatibleFormat.WithDNR(), Err: ErrFieldValue}
	}
	if x.QID == 0xffff {
		return x, &FieldError{Structure: name, Field: "QID", Offset: ConnectOffsetQID,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrFieldValue}
	}
	if x.SQSize == 0 {
		return x, &FieldError{Structure: name, Field: "SQSIZE", Offset: ConnectOffsetSQSIZE,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrFieldValue}
	}
	return x, nil
}

// ConnectDataSize is the size of the data of a Connect command.
const ConnectDataSize = 1024

// Byte offsets of the fields of Connect data (NVMe Base 2.x Figure 580).
const (
	ConnectDataOffsetHOSTID  = 0   // Host Identifier, 16 bytes
	ConnectDataOffsetCNTLID  = 16  // Controller ID
	ConnectDataOffsetSUBNQN  = 256 // NVM Subsystem NQN, 256 bytes
	ConnectDataOffsetHOSTNQN = 512 // Host NQN, 256 bytes
)

// ConnectData is the data of a Connect command.
type ConnectData struct {
	// HostID is the 128-bit Host Identifier.
	HostID [16]byte
	// CNTLID is the controller asked for: CNTLIDDynamic or
	// CNTLIDAnyStatic on the admin queue, the allocated controller on an
	// I/O queue.
	CNTLID uint16
	// SubNQN and HostNQN are NVMe Qualified Names (see ValidateNQN).
	SubNQN  string
	HostNQN string
}

// MarshalTo writes the 1024 bytes of Connect data into b, reserved bytes
// cleared. Both NQNs must be valid and CNTLID outside FFF0h..FFFDh.
func (d *ConnectData) MarshalTo(b []byte) (int, error) {
	const name = "Connect data"
	if err := needAtLeast(name, b, ConnectDataSize); err != nil {
		return 0, err
	}
	b = b[:ConnectDataSize]
	clear(b)
	copy(b[ConnectDataOffsetHOSTID:], d.HostID[:])
	if d.CNTLID > MaxCNTLID && d.CNTLID < CNTLIDAnyStatic {
		return 0, &FieldError{Structure: name, Field: "CNTLID", Offset: ConnectDataOffsetCNTLID, InData: true, Err: ErrFieldValue}
	}
	le.PutUint16(b[ConnectDataOffsetCNTLID:], d.CNTLID)
	if err := putNQN(b[ConnectDataOffsetSUBNQN:ConnectDataOffsetSUBNQN+NQNFieldSize], d.SubNQN, false); err != nil {
		return 0, &FieldError{Structure: name, Field: "SUBNQN", Offset: ConnectDataOffsetSUBNQN, InData: true, Err: err}
	}
	if err := putNQN(b[ConnectDataOffsetHOSTNQN:ConnectDataOffsetHOSTNQN+NQNFieldSize], d.HostNQN, false); err != nil {
		return 0, &FieldError{Structure: name, Field: "HOSTNQN", Offset: ConnectDataOffsetHOSTNQN, InData: true, Err: err}
	}
	return ConnectDataSize, nil
}

// MarshalBinary returns the 1024 bytes of Connect data.
func (d *ConnectData) MarshalBinary() ([]byte, error) {
	b := make([]byte, ConnectDataSize)
	if _, err := d.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly 1024 bytes of Connect data. An invalid
// NQN, or a CNTLID in the reserved range FFF0h..FFFDh, is refused with a
// *FieldError carrying Connect Invalid Parameters and the field's offset
// in the data, ready for the Connect response.
func (d *ConnectData) UnmarshalBinary(b []byte) error {
	const name = "Connect data"
	if err := needExactly(name, b, ConnectDataSize); err != nil {
		return err
	}
	var x ConnectData
	copy(x.HostID[:], b[ConnectDataOffsetHOSTID:])
	x.CNTLID = le.Uint16(b[ConnectDataOffsetCNTLID:])
	if x.CNTLID > MaxCNTLID && x.CNTLID < CNTLIDAnyStatic {
		return &FieldError{Structure: name, Field: "CNTLID", Offset: ConnectDataOffsetCNTLID, InData: true,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrFieldValue}
	}
	var err error
	if x.SubNQN, err = getNQN(b[ConnectDataOffsetSUBNQN:ConnectDataOffsetSUBNQN+NQNFieldSize], false); err != nil {
		return &FieldError{Structure: name, Field: "SUBNQN", Offset: ConnectDataOffsetSUBNQN, InData: true,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: err}
	}
	if x.HostNQN, err = getNQN(b[ConnectDataOffsetHOSTNQN:ConnectDataOffsetHOSTNQN+NQNFieldSize], false); err != nil {
		return &FieldError{Structure: name, Field: "HOSTNQN", Offset: ConnectDataOffsetHOSTNQN, InData: true,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: err}
	}
	*d = x
	return nil
}

// UnmarshalTolerant decodes Connect data as a controller receives it,
// accepting what Linux nvmet and SPDK's nvmf_tgt accept: an NQN field is
// the text before its first NUL, which may be empty and is not checked
// against the NQN rules, and what follows the NUL is ignored. A field
// with no NUL at all, or a CNTLID in the reserved range, is refused
// with Connect Invalid Parameters naming the field. Whether an empty or
// unusual host NQN may connect is the allow-list's question.
func (d *ConnectData) UnmarshalTolerant(b []byte) error {
	const name = "Connect data"
	if err := needExactly(name, b, ConnectDataSize); err != nil {
		return err
	}
	var x ConnectData
	copy(x.HostID[:], b[ConnectDataOffsetHOSTID:])
	x.CNTLID = le.Uint16(b[ConnectDataOffsetCNTLID:])
	if x.CNTLID > MaxCNTLID && x.CNTLID < CNTLIDAnyStatic {
		return &FieldError{Structure: name, Field: "CNTLID", Offset: ConnectDataOffsetCNTLID, InData: true,
			Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrFieldValue}
	}
	for _, f := range []struct {
		name string
		off  int
		dst  *string
	}{{"SUBNQN", ConnectDataOffsetSUBNQN, &x.SubNQN}, {"HOSTNQN", ConnectDataOffsetHOSTNQN, &x.HostNQN}} {
		field := b[f.off : f.off+NQNFieldSize]
		n := bytes.IndexByte(field, 0)
		if n < 0 {
			return &FieldError{Structure: name, Field: f.name, Offset: f.off, InData: true,
				Status: StatusConnectInvalidParameters.WithDNR(), Err: ErrInvalidNQN}
		}
		*f.dst = string(field[:n])
	}
	*d = x
	return nil
}

// AuthRequirements is the AUTHREQ field of a successful Connect response.
type AuthRequirements uint16

// Authentication requirements.
const (
	// AuthTransactionRequired (ATR): NVMe in-band authentication is required.
	AuthTransactionRequired AuthRequirements = 1 << 1
	// AuthSecureChannelRequired (ASCR): authentication followed by secure
	// channel establishment is required.
	AuthSecureChannelRequired AuthRequirements = 1 << 2
)

// ConnectResponse is DW0 of a successful Connect response.
type ConnectResponse struct {
	// CNTLID is the controller ID allocated to the host.
	CNTLID  uint16
	AuthReq AuthRequirements
}

// DW0 encodes r: CNTLID in bits 15:0, AUTHREQ in bits 31:16.
func (r ConnectResponse) DW0() uint32 { return uint32(r.CNTLID) | uint32(r.AuthReq)<<16 }

// ParseConnectResponse decodes DW0 of a successful Connect response.
func ParseConnectResponse(dw0 uint32) ConnectResponse {
	return ConnectResponse{CNTLID: uint16(dw0), AuthReq: AuthRequirements(dw0 >> 16)}
}

// InvalidParameter is DW0 of a Connect response with the status Connect
// Invalid Parameters: where the offending field is.
type InvalidParameter struct {
	// InData is IATTR bit 0 (IPS): the offset counts from the start of the
	// Connect data rather than of the submission queue entry.
	InData bool
	// Offset is IPO, the byte offset of the field.
	Offset uint16
}

// DW0 encodes p: IPO in bits 15:0, IATTR in bits 23:16.
func (p InvalidParameter) DW0() uint32 {
	v := uint32(p.Offset)
	if p.InData {
		v |= 1 << 16
	}
	return v
}

// ParseInvalidParameter decodes DW0 of a Connect Invalid Parameters response.
func ParseInvalidParameter(dw0 uint32) InvalidParameter {
	return InvalidParameter{InData: dw0&(1<<16) != 0, Offset: uint16(dw0)}
}

// Byte offsets of the fields of Property Get and Property Set commands
// (NVMe Base 2.x, 6.5 and 6.6).
const (
	PropertyOffsetATTRIB = 40 // Attributes: size in bits 2:0
	PropertyOffsetOFST   = 44 // property offset
	PropertyOffsetVALUE  = 48 // Property Set value, 8 bytes
)

// PropertyGet is a Property Get command. The response carries the value
// in DW0 (and DW1 for an 8-byte property): see Completion.Value64.
type PropertyGet struct {
	CID    uint16
	Size   PropertySize
	Offset uint32
}

// Command encodes x as a submission queue entry.
func (x *PropertyGet) Command() Command {
	var c Command
	c.SetFabricsType(FabricsPropertyGet)
	c.CID = x.CID
	c.CDW10 = uint32(x.Size)
	c.CDW11 = x.Offset
	return c
}

// ParsePropertyGet decodes a Property Get command. A reserved size is
// refused with a *FieldError carrying Invalid Field in Command.
func ParsePropertyGet(c *Command) (PropertyGet, error) {
	const name = "Property Get command"
	if err := c.isFabrics(FabricsPropertyGet, name); err != nil {
		return PropertyGet{}, err
	}
	x := PropertyGet{CID: c.CID, Size: PropertySize(bits(c.CDW10, 0, 3)), Offset: c.CDW11}
	if err := x.Size.check(name); err != nil {
		return x, err
	}
	return x, nil
}

// PropertySet is a Property Set command. For a 4-byte property only the
// low 32 bits of Value are meaningful.
type PropertySet struct {
	CID    uint16
	Size   PropertySize
	Offset uint32
	Value  uint64
}

// Command encodes x as a submission queue entry.
func (x *PropertySet) Command() Command {
	var c Command
	c.SetFabricsType(FabricsPropertySet)
	c.CID = x.CID
	c.CDW10 = uint32(x.Size)
	c.CDW11 = x.Offset
	c.CDW12 = uint32(x.Value)
	c.CDW13 = uint32(x.Value >> 32)
	return c
}

// ParsePropertySet decodes a Property Set command. A reserved size is
// refused with a *FieldError carrying Invalid Field in Command.
func ParsePropertySet(c *Command) (PropertySet, error) {
	const name = "Property Set command"
	if err := c.isFabrics(FabricsPropertySet, name); err != nil {
		return PropertySet{}, err
	}
	x := PropertySet{
		CID:    c.CID,
		Size:   PropertySize(bits(c.CDW10, 0, 3)),
		Offset: c.CDW11,
		Value:  uint64(c.CDW13)<<32 | uint64(c.CDW12),
	}
	if err := x.Size.check(name); err != nil {
		return x, err
	}
	return x, nil
}

// Disconnect is a Disconnect command: it deletes the I/O queue it is
// submitted on. On the admin queue it is answered with Invalid Queue Type.
type Disconnect struct {
	CID    uint16
	RecFmt uint16
}

// Command encodes x as a submission queue entry.
func (x *Disconnect) Command() Command {
	var c Command
	c.SetFabricsType(FabricsDisconnect)
	c.CID = x.CID
	c.CDW10 = uint32(x.RecFmt)
	return c
}

// ParseDisconnect decodes a Disconnect command. A record format other than
// 0 is refused with a *FieldError carrying Incompatible Format.
func ParseDisconnect(c *Command) (Disconnect, error) {
	const name = "Disconnect command"
	if err := c.isFabrics(FabricsDisconnect, name); err != nil {
		return Disconnect{}, err
	}
	x := Disconnect{CID: c.CID, RecFmt: uint16(c.CDW10)}
	if x.RecFmt != 0 {
		return x, &FieldError{Structure: name, Field: "RECFMT", Offset: ConnectOffsetRECFMT,
			Status: StatusConnectIncompatibleFormat.WithDNR(), Err: ErrFieldValue}
	}
	return x, nil
}
