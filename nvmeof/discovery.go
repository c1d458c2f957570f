package nvmeof

// TransportType is the TRTYPE of a discovery log entry (and of an error
// log entry).
type TransportType uint8

// Transport types.
const (
	TransportRDMA      TransportType = 1
	TransportFC        TransportType = 2
	TransportTCP       TransportType = 3
	TransportIntraHost TransportType = 254 // loopback, reserved for host use
)

// AddressFamily is the ADRFAM of a discovery log entry.
type AddressFamily uint8

// Address families.
const (
	AddressFamilyIPv4      AddressFamily = 1
	AddressFamilyIPv6      AddressFamily = 2
	AddressFamilyIB        AddressFamily = 3
	AddressFamilyFC        AddressFamily = 4
	AddressFamilyIntraHost AddressFamily = 254
)

// SubsystemType is the SUBTYPE of a discovery log entry.
type SubsystemType uint8

// Subsystem types.
const (
	SubsystemReferral         SubsystemType = 1 // another Discovery subsystem
	SubsystemNVMe             SubsystemType = 2 // an NVM subsystem with namespaces
	SubsystemCurrentDiscovery SubsystemType = 3 // this Discovery subsystem
)

// TransportRequirements is the TREQ byte of a discovery log entry.
type TransportRequirements uint8

// Transport requirements: a secure channel value in bits 1:0, plus flags.
const (
	TREQSecureChannelMask        TransportRequirements = 0x03
	TREQSecureChannelUnspecified TransportRequirements = 0x00
	TREQSecureChannelRequired    TransportRequirements = 0x01
	TREQSecureChannelNotRequired TransportRequirements = 0x02
	// TREQDisableSQFlowControl: the controller can disable SQ flow control.
	TREQDisableSQFlowControl TransportRequirements = 1 << 2
)

// RDMA transport specific address subtype values (TSAS of an RDMA entry,
// NVMe RDMA Transport Specification).
const (
	RDMAQPTypeReliableConnected uint8 = 1
	RDMAQPTypeReliableDatagram  uint8 = 2

	RDMAProviderNone   uint8 = 1 // no provider specified
	RDMAProviderIB     uint8 = 2
	RDMAProviderRoCE   uint8 = 3
	RDMAProviderRoCEv2 uint8 = 4
	RDMAProviderIWARP  uint8 = 5

	RDMACMSRDMACM uint8 = 1 // sockets based endpoint addressing (RDMA_CM)
)

// TCP transport specific address subtype values (SECTYPE, byte 0 of TSAS).
const (
	TCPSecTypeNone  uint8 = 0
	TCPSecTypeTLS12 uint8 = 1
	TCPSecTypeTLS13 uint8 = 2
)

// Discovery log page sizes.
const (
	DiscoveryLogHeaderSize = 1024
	DiscoveryLogEntrySize  = 1024
)

// Byte offsets of the discovery log page header (NVMe Base 2.x,
// 5.2.12.3.3, Figure 312).
const (
	DiscLogOffsetGENCTR = 0  // Generation Counter, 8 bytes
	DiscLogOffsetNUMREC = 8  // Number of Records, 8 bytes
	DiscLogOffsetRECFMT = 16 // Record Format
)

// Byte offsets of a discovery log page entry (NVMe Base 2.x Figure 310).
const (
	DiscEntryOffsetTRTYPE  = 0
	DiscEntryOffsetADRFAM  = 1
	DiscEntryOffsetSUBTYPE = 2
	DiscEntryOffsetTREQ    = 3
	DiscEntryOffsetPORTID  = 4
	DiscEntryOffsetCNTLID  = 6
	DiscEntryOffsetASQSZ   = 8
	DiscEntryOffsetEFLAGS  = 10
	DiscEntryOffsetTRSVCID = 32  // 32 bytes ASCII
	DiscEntryOffsetSUBNQN  = 256 // 256 bytes NQN
	DiscEntryOffsetTRADDR  = 512 // 256 bytes ASCII
	DiscEntryOffsetTSAS    = 768 // 256 bytes
)

// Field sizes of discovery log entry strings.
const (
	TRSVCIDSize = 32
	TRADDRSize  = 256
	TSASSize    = 256
)

// Byte offsets inside the TSAS of an RDMA entry.
const (
	TSASOffsetRDMAQPTYPE = 0
	TSASOffsetRDMAPRTYPE = 1
	TSASOffsetRDMACMS    = 2
	TSASOffsetRDMAPKEY   = 8 // partition key, for AF_IB
)

// RDMATransportAddress is the TSAS of an RDMA discovery log entry.
type RDMATransportAddress struct {
	QPType   uint8 // RDMAQPType*
	Provider uint8 // RDMAProvider*
	CMS      uint8 // RDMACMS*
	PKey     uint16
}

// DiscoveryLogEntry is one 1024-byte entry of the discovery log page.
type DiscoveryLogEntry struct {
	TRTYPE  TransportType
	ADRFAM  AddressFamily
	SUBTYPE SubsystemType
	TREQ    TransportRequirements
	PORTID  uint16
	// CNTLID is CNTLIDDynamic for a subsystem of the dynamic controller model.
	CNTLID uint16
	// ASQSZ is the largest admin submission queue, at least 32 entries.
	ASQSZ  uint16
	EFLAGS uint16
	// TRSVCID is the transport service identifier: the port number as
	// text for RDMA and TCP ("4420").
	TRSVCID string
	SUBNQN  string
	// TRADDR is the transport address as text ("192.0.2.1").
	TRADDR string
	// TSAS is the transport specific address subtype; use RDMA/SetRDMA
	// for RDMA entries, TSAS[0] is SECTYPE for TCP.
	TSAS [TSASSize]byte
}

// RDMA decodes the TSAS of an RDMA entry.
func (e *DiscoveryLogEntry) RDMA() RDMATransportAddress {
	return RDMATransportAddress{
		QPType:   e.TSAS[TSASOffsetRDMAQPTYPE],
		Provider: e.TSAS[TSASOffsetRDMAPRTYPE],
		CMS:      e.TSAS[TSASOffsetRDMACMS],
		PKey:     le.Uint16(e.TSAS[TSASOffsetRDMAPKEY:]),
	}
}

// SetRDMA sets the TSAS of an RDMA entry, other bytes cleared.
func (e *DiscoveryLogEntry) SetRDMA(r RDMATransportAddress) {
	e.TSAS = [TSASSize]byte{}
	e.TSAS[TSASOffsetRDMAQPTYPE] = r.QPType
	e.TSAS[TSASOffsetRDMAPRTYPE] = r.Provider
	e.TSAS[TSASOffsetRDMACMS] = r.CMS
	le.PutUint16(e.TSAS[TSASOffsetRDMAPKEY:], r.PKey)
}

// MarshalTo writes the 1024-byte entry into b, reserved bytes cleared.
// TRSVCID and TRADDR are ASCII, space-padded; SUBNQN must be a valid NQN.
func (e *DiscoveryLogEntry) MarshalTo(b []byte) (int, error) {
	const name = "discovery log entry"
	if err := needAtLeast(name, b, DiscoveryLogEntrySize); err != nil {
		return 0, err
	}
	b = b[:DiscoveryLogEntrySize]
	clear(b)
	b[DiscEntryOffsetTRTYPE] = byte(e.TRTYPE)
	b[DiscEntryOffsetADRFAM] = byte(e.ADRFAM)
	b[DiscEntryOffsetSUBTYPE] = byte(e.SUBTYPE)
	b[DiscEntryOffsetTREQ] = byte(e.TREQ)
	le.PutUint16(b[DiscEntryOffsetPORTID:], e.PORTID)
	le.PutUint16(b[DiscEntryOffsetCNTLID:], e.CNTLID)
	le.PutUint16(b[DiscEntryOffsetASQSZ:], e.ASQSZ)
	le.PutUint16(b[DiscEntryOffsetEFLAGS:], e.EFLAGS)
	if err := putASCII(b[DiscEntryOffsetTRSVCID:DiscEntryOffsetTRSVCID+TRSVCIDSize], e.TRSVCID); err != nil {
		return 0, &FieldError{Structure: name, Field: "TRSVCID", Offset: DiscEntryOffsetTRSVCID, Err: err}
	}
	if err := putNQN(b[DiscEntryOffsetSUBNQN:DiscEntryOffsetSUBNQN+NQNFieldSize], e.SUBNQN, false); err != nil {
		return 0, &FieldError{Structure: name, Field: "SUBNQN", Offset: DiscEntryOffsetSUBNQN, Err: err}
	}
	if err := putASCII(b[DiscEntryOffsetTRADDR:DiscEntryOffsetTRADDR+TRADDRSize], e.TRADDR); err != nil {
		return 0, &FieldError{Structure: name, Field: "TRADDR", Offset: DiscEntryOffsetTRADDR, Err: err}
	}
	copy(b[DiscEntryOffsetTSAS:], e.TSAS[:])
	return DiscoveryLogEntrySize, nil
}

// MarshalBinary returns the 1024-byte entry.
func (e *DiscoveryLogEntry) MarshalBinary() ([]byte, error) {
	b := make([]byte, DiscoveryLogEntrySize)
	if _, err := e.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly 1024 bytes. TRSVCID and TRADDR must be
// ASCII (space or NUL padding is removed); SUBNQN must be a valid NQN.
func (e *DiscoveryLogEntry) UnmarshalBinary(b []byte) error {
	const name = "discovery log entry"
	if err := needExactly(name, b, DiscoveryLogEntrySize); err != nil {
		return err
	}
	x := DiscoveryLogEntry{
		TRTYPE:  TransportType(b[DiscEntryOffsetTRTYPE]),
		ADRFAM:  AddressFamily(b[DiscEntryOffsetADRFAM]),
		SUBTYPE: SubsystemType(b[DiscEntryOffsetSUBTYPE]),
		TREQ:    TransportRequirements(b[DiscEntryOffsetTREQ]),
		PORTID:  le.Uint16(b[DiscEntryOffsetPORTID:]),
		CNTLID:  le.Uint16(b[DiscEntryOffsetCNTLID:]),
		ASQSZ:   le.Uint16(b[DiscEntryOffsetASQSZ:]),
		EFLAGS:  le.Uint16(b[DiscEntryOffsetEFLAGS:]),
	}
	var err error
	if x.TRSVCID, err = getASCII(b[DiscEntryOffsetTRSVCID : DiscEntryOffsetTRSVCID+TRSVCIDSize]); err != nil {
		return &FieldError{Structure: name, Field: "TRSVCID", Offset: DiscEntryOffsetTRSVCID, Err: err}
	}
	if x.SUBNQN, err = getNQN(b[DiscEntryOffsetSUBNQN:DiscEntryOffsetSUBNQN+NQNFieldSize], false); err != nil {
		return &FieldError{Structure: name, Field: "SUBNQN", Offset: DiscEntryOffsetSUBNQN, Err: err}
	}
	if x.TRADDR, err = getASCII(b[DiscEntryOffsetTRADDR : DiscEntryOffsetTRADDR+TRADDRSize]); err != nil {
		return &FieldError{Structure: name, Field: "TRADDR", Offset: DiscEntryOffsetTRADDR, Err: err}
	}
	copy(x.TSAS[:], b[DiscEntryOffsetTSAS:])
	*e = x
	return nil
}

// DiscoveryLogHeader is the header of the discovery log page.
type DiscoveryLogHeader struct {
	GenCtr uint64
	NumRec uint64
	RecFmt uint16
}

// ParseDiscoveryLogHeader decodes the header from the first 1024 bytes of
// b: a host reads the header first to learn how many records follow.
func ParseDiscoveryLogHeader(b []byte) (DiscoveryLogHeader, error) {
	if err := needAtLeast("discovery log header", b, DiscoveryLogHeaderSize); err != nil {
		return DiscoveryLogHeader{}, err
	}
	h := DiscoveryLogHeader{
		GenCtr: le.Uint64(b[DiscLogOffsetGENCTR:]),
		NumRec: le.Uint64(b[DiscLogOffsetNUMREC:]),
		RecFmt: le.Uint16(b[DiscLogOffsetRECFMT:]),
	}
	if h.RecFmt != 0 {
		return h, &FieldError{Structure: "discovery log header", Field: "RECFMT", Offset: DiscLogOffsetRECFMT, Err: ErrFieldValue}
	}
	return h, nil
}

// DiscoveryLogSize returns the size of a discovery log page with numrec
// entries.
func DiscoveryLogSize(numrec int) int {
	return DiscoveryLogHeaderSize + numrec*DiscoveryLogEntrySize
}

// DiscoveryLog is the Discovery log page (LID 70h): a header and its
// entries. NUMREC on the wire is len(Entries).
type DiscoveryLog struct {
	GenCtr  uint64
	Entries []DiscoveryLogEntry
}

// Size returns the size of the page on the wire.
func (d *DiscoveryLog) Size() int { return DiscoveryLogSize(len(d.Entries)) }

// MarshalTo writes the page into b, which must hold Size() bytes.
func (d *DiscoveryLog) MarshalTo(b []byte) (int, error) {
	n := d.Size()
	if err := needAtLeast("discovery log", b, n); err != nil {
		return 0, err
	}
	h := b[:DiscoveryLogHeaderSize]
	clear(h)
	le.PutUint64(h[DiscLogOffsetGENCTR:], d.GenCtr)
	le.PutUint64(h[DiscLogOffsetNUMREC:], uint64(len(d.Entries)))
	for i := range d.Entries {
		off := DiscoveryLogSize(i)
		if _, err := d.Entries[i].MarshalTo(b[off:]); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// MarshalBinary returns the page.
func (d *DiscoveryLog) MarshalBinary() ([]byte, error) {
	b := make([]byte, d.Size())
	if _, err := d.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes a whole page: the header and exactly the NUMREC
// entries it announces. A length that does not match NUMREC is refused
// before anything is allocated.
func (d *DiscoveryLog) UnmarshalBinary(b []byte) error {
	const name = "discovery log"
	h, err := ParseDiscoveryLogHeader(b)
	if err != nil {
		return err
	}
	room := uint64(len(b)-DiscoveryLogHeaderSize) / DiscoveryLogEntrySize
	if h.NumRec != room || len(b)%DiscoveryLogEntrySize != 0 {
		return &FieldError{Structure: name, Field: "NUMREC", Offset: DiscLogOffsetNUMREC, Err: ErrLength}
	}
	x := DiscoveryLog{GenCtr: h.GenCtr, Entries: make([]DiscoveryLogEntry, h.NumRec)}
	for i := range x.Entries {
		off := DiscoveryLogSize(i)
		if err := x.Entries[i].UnmarshalBinary(b[off : off+DiscoveryLogEntrySize]); err != nil {
			return err
		}
	}
	*d = x
	return nil
}
