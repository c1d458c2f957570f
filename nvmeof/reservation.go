package nvmeof

import "fmt"

// Reservations (NVMe Base 2.x 8.19 and the reservation commands of 7.x):
// the Reservation Register, Report, Acquire and Release commands, their
// data, and the reservation status data structure in its extended form
// (128-bit host identifiers, the only form a fabrics controller reports).

// Reservation command opcodes (I/O queues).
const (
	IOReservationRegister Opcode = 0x0d
	IOReservationReport   Opcode = 0x0e
	IOReservationAcquire  Opcode = 0x11
	IOReservationRelease  Opcode = 0x15
)

// ReservationType is RTYPE.
type ReservationType uint8

// Reservation types.
const (
	ReservationNone                   ReservationType = 0
	ReservationWriteExclusive         ReservationType = 1
	ReservationExclusiveAccess        ReservationType = 2
	ReservationWriteExclusiveRegOnly  ReservationType = 3
	ReservationExclusiveAccessRegOnly ReservationType = 4
	ReservationWriteExclusiveAllRegs  ReservationType = 5
	ReservationExclusiveAccessAllRegs ReservationType = 6
)

var reservationTypeNames = [...]string{
	"none", "Write Exclusive", "Exclusive Access", "Write Exclusive - Registrants Only",
	"Exclusive Access - Registrants Only", "Write Exclusive - All Registrants", "Exclusive Access - All Registrants",
}

func (t ReservationType) String() string {
	if int(t) < len(reservationTypeNames) {
		return reservationTypeNames[t]
	}
	return fmt.Sprintf("RTYPE %d", uint8(t))
}

// Valid reports whether t is one of the six reservation types.
func (t ReservationType) Valid() bool {
	return t >= ReservationWriteExclusive && t <= ReservationExclusiveAccessAllRegs
}

// AllRegistrants reports whether every registrant holds a reservation of
// type t (Write Exclusive or Exclusive Access - All Registrants).
func (t ReservationType) AllRegistrants() bool {
	return t == ReservationWriteExclusiveAllRegs || t == ReservationExclusiveAccessAllRegs
}

// ExclusiveAccess reports whether t keeps hosts that may not access the
// namespace from reading it too, not only from writing it.
func (t ReservationType) ExclusiveAccess() bool {
	return t == ReservationExclusiveAccess || t == ReservationExclusiveAccessRegOnly || t == ReservationExclusiveAccessAllRegs
}

// RegistrantsAccess reports whether registrants that do not hold the
// reservation may access the namespace as the holder does.
func (t ReservationType) RegistrantsAccess() bool {
	return t >= ReservationWriteExclusiveRegOnly && t.Valid()
}

// RESCAP bits of Identify Namespace (Reservation Capabilities): bit 0
// Persist Through Power Loss, bits 1-6 one per reservation type, bit 7
// Ignore Existing Key (IEKEY set ignores CRKEY, as NVMe 1.3 and later
// define it).
const (
	RESCAPPersistThroughPowerLoss uint8 = 1 << 0
	RESCAPAllTypes                uint8 = 0x7e
	RESCAPIgnoreExistingKey       uint8 = 1 << 7
)

// Reservation actions: RREGA of Register, RACQA of Acquire, RRELA of
// Release (CDW10 bits 2:0).
const (
	ReservationRegister   uint8 = 0
	ReservationUnregister uint8 = 1
	ReservationReplace    uint8 = 2

	ReservationAcquire         uint8 = 0
	ReservationPreempt         uint8 = 1
	ReservationPreemptAndAbort uint8 = 2

	ReservationRelease uint8 = 0
	ReservationClear   uint8 = 1
)

// CPTPL values of Reservation Register (CDW10 bits 31:30).
const (
	CPTPLNoChange uint8 = 0
	CPTPLClear    uint8 = 2
	CPTPLSet      uint8 = 3
)

// ReservationAction returns RREGA, RACQA or RRELA (CDW10 bits 2:0).
func (c *Command) ReservationAction() uint8 { return uint8(c.CDW10 & 7) }

// IEKEY returns Ignore Existing Key (CDW10 bit 3).
func (c *Command) IEKEY() bool { return c.CDW10&(1<<3) != 0 }

// ReservationType returns RTYPE (CDW10 bits 15:8) of Acquire and Release.
func (c *Command) ReservationType() ReservationType { return ReservationType(c.CDW10 >> 8) }

// CPTPL returns Change Persist Through Power Loss State (CDW10 bits
// 31:30) of Register.
func (c *Command) CPTPL() uint8 { return uint8(c.CDW10 >> 30) }

// ReportEDS returns Extended Data Structure (CDW11 bit 0) of Report.
func (c *Command) ReportEDS() bool { return c.CDW11&1 != 0 }

// SetReservation sets CDW10 of Register, Acquire or Release.
func (c *Command) SetReservation(action uint8, iekey bool, rtype ReservationType, cptpl uint8) {
	c.CDW10 = uint32(action&7) | uint32(rtype)<<8 | uint32(cptpl&3)<<30
	if iekey {
		c.CDW10 |= 1 << 3
	}
}

// ReservationKeysSize is the data of Register and Acquire: two keys. The
// data of Release is the first key alone (ReservationReleaseDataSize).
const (
	ReservationKeysSize        = 16
	ReservationReleaseDataSize = 8
)

// ReservationKeys is the data of Register (CRKEY, NRKEY), Acquire (CRKEY,
// PRKEY) and Release (CRKEY alone).
type ReservationKeys struct {
	Current uint64 // CRKEY
	Other   uint64 // NRKEY or PRKEY
}

// MarshalTo writes the keys into b: both into 16 bytes, CRKEY alone into 8.
func (k *ReservationKeys) MarshalTo(b []byte) (int, error) {
	switch {
	case len(b) >= ReservationKeysSize:
		le.PutUint64(b, k.Current)
		le.PutUint64(b[8:], k.Other)
		return ReservationKeysSize, nil
	case len(b) >= ReservationReleaseDataSize:
		le.PutUint64(b, k.Current)
		return ReservationReleaseDataSize, nil
	}
	return 0, sizeError("reservation keys", len(b), ReservationReleaseDataSize, ErrShortBuffer)
}

// MarshalBinary encodes both keys.
func (k *ReservationKeys) MarshalBinary() ([]byte, error) {
	b := make([]byte, ReservationKeysSize)
	_, err := k.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes 16 bytes (both keys) or 8 (CRKEY alone).
func (k *ReservationKeys) UnmarshalBinary(b []byte) error {
	switch len(b) {
	case ReservationKeysSize:
		*k = ReservationKeys{Current: le.Uint64(b), Other: le.Uint64(b[8:])}
	case ReservationReleaseDataSize:
		*k = ReservationKeys{Current: le.Uint64(b)}
	default:
		return sizeError("reservation keys", len(b), ReservationKeysSize, ErrLength)
	}
	return nil
}

// The extended reservation status data structure: a 64-byte header
// (GEN, RTYPE, REGSTS, PTPLS) and one 64-byte entry per registrant
// (CNTLID, RCSTS, RKEY, the 128-bit HOSTID).
const (
	ResStatusHeaderSize    = 64
	ResStatusEntrySize     = 64
	ResStatusOffsetGEN     = 0 // 4 bytes
	ResStatusOffsetRTYPE   = 4
	ResStatusOffsetREGSTS  = 5 // 2 bytes: number of registrants
	ResStatusOffsetPTPLS   = 9
	ResEntryOffsetCNTLID   = 0 // 2 bytes
	ResEntryOffsetRCSTS    = 2 // bit 0: holds the reservation
	ResEntryOffsetRKEY     = 8 // 8 bytes
	ResEntryOffsetHOSTID   = 16
	resStatusMaxRegistrant = 0xffff
)

// Registrant is one entry of a reservation status.
type Registrant struct {
	CNTLID uint16
	Holds  bool // RCSTS bit 0: the registrant holds the reservation
	RKey   uint64
	HostID [16]byte
}

// ReservationStatus is the extended reservation status data structure
// that Reservation Report returns.
type ReservationStatus struct {
	GEN         uint32
	RTYPE       ReservationType
	PTPLS       bool
	Registrants []Registrant
}

// Size is the length of the whole structure.
func (s *ReservationStatus) Size() int {
	return ResStatusHeaderSize + ResStatusEntrySize*len(s.Registrants)
}

// MarshalTo writes as much of the structure as b holds (a host asks for
// NUMD dwords, maybe fewer than the whole), clearing reserved bytes, and
// returns the bytes written. It does not allocate.
func (s *ReservationStatus) MarshalTo(b []byte) (int, error) {
	if len(s.Registrants) > resStatusMaxRegistrant {
		return 0, fmt.Errorf("%w: %d registrants", ErrFieldValue, len(s.Registrants))
	}
	var hdr [ResStatusHeaderSize]byte
	le.PutUint32(hdr[ResStatusOffsetGEN:], s.GEN)
	hdr[ResStatusOffsetRTYPE] = byte(s.RTYPE)
	le.PutUint16(hdr[ResStatusOffsetREGSTS:], uint16(len(s.Registrants)))
	if s.PTPLS {
		hdr[ResStatusOffsetPTPLS] = 1
	}
	n := copy(b, hdr[:])
	for _, r := range s.Registrants {
		if n >= len(b) {
			break
		}
		var e [ResStatusEntrySize]byte
		le.PutUint16(e[ResEntryOffsetCNTLID:], r.CNTLID)
		if r.Holds {
			e[ResEntryOffsetRCSTS] = 1
		}
		le.PutUint64(e[ResEntryOffsetRKEY:], r.RKey)
		copy(e[ResEntryOffsetHOSTID:], r.HostID[:])
		n += copy(b[n:], e[:])
	}
	return n, nil
}

// MarshalBinary encodes the whole structure.
func (s *ReservationStatus) MarshalBinary() ([]byte, error) {
	b := make([]byte, s.Size())
	_, err := s.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes a whole extended reservation status: the
// header and exactly REGSTS entries (ErrLength for any other length).
// Reserved bytes are ignored.
func (s *ReservationStatus) UnmarshalBinary(b []byte) error {
	if err := needAtLeast("reservation status", b, ResStatusHeaderSize); err != nil {
		return err
	}
	n := int(le.Uint16(b[ResStatusOffsetREGSTS:]))
	if err := needExactly("reservation status", b, ResStatusHeaderSize+n*ResStatusEntrySize); err != nil {
		return err
	}
	x := ReservationStatus{
		GEN:   le.Uint32(b[ResStatusOffsetGEN:]),
		RTYPE: ReservationType(b[ResStatusOffsetRTYPE]),
		PTPLS: b[ResStatusOffsetPTPLS]&1 != 0,
	}
	if n > 0 {
		x.Registrants = make([]Registrant, n)
	}
	for i := range x.Registrants {
		e := b[ResStatusHeaderSize+i*ResStatusEntrySize:]
		r := &x.Registrants[i]
		r.CNTLID = le.Uint16(e[ResEntryOffsetCNTLID:])
		r.Holds = e[ResEntryOffsetRCSTS]&1 != 0
		r.RKey = le.Uint64(e[ResEntryOffsetRKEY:])
		copy(r.HostID[:], e[ResEntryOffsetHOSTID:])
	}
	*s = x
	return nil
}

// Reservation Notification log page (80h): one notice per read, the
// oldest first.
const (
	ResNoticeLogSize      = 64
	ResNoticeOffsetLPC    = 0 // 8 bytes, Log Page Count
	ResNoticeOffsetRNLPT  = 8 // Reservation Notification Log Page Type
	ResNoticeOffsetNALP   = 9 // Number of Available Log Pages after this one
	ResNoticeOffsetNSID   = 12
	ResNoticeEmpty        = 0
	ResNoticeRegPreempted = 1 // the host's registration was preempted
	ResNoticeResReleased  = 2 // a reservation was released
	ResNoticeResPreempted = 3 // a reservation was preempted
	// AsyncEventInfoReservationLog is the event information of the
	// Asynchronous Event (type I/O command specific status) that says a
	// reservation notice is in log page 80h.
	AsyncEventInfoReservationLog = 0
)

// ReservationNotice is the Reservation Notification log page.
type ReservationNotice struct {
	Count     uint64 // LPC: notices created so far for this controller
	Type      uint8  // RNLPT (ResNotice...)
	Available uint8  // NALP: notices still waiting, at most 255
	NSID      uint32
}

// MarshalTo writes the 64-byte log page into b, reserved bytes cleared.
func (n *ReservationNotice) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("reservation notification log", b, ResNoticeLogSize); err != nil {
		return 0, err
	}
	clear(b[:ResNoticeLogSize])
	le.PutUint64(b[ResNoticeOffsetLPC:], n.Count)
	b[ResNoticeOffsetRNLPT] = n.Type
	b[ResNoticeOffsetNALP] = n.Available
	le.PutUint32(b[ResNoticeOffsetNSID:], n.NSID)
	return ResNoticeLogSize, nil
}

// MarshalBinary encodes the log page.
func (n *ReservationNotice) MarshalBinary() ([]byte, error) {
	b := make([]byte, ResNoticeLogSize)
	_, err := n.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes exactly 64 bytes.
func (n *ReservationNotice) UnmarshalBinary(b []byte) error {
	if err := needExactly("reservation notification log", b, ResNoticeLogSize); err != nil {
		return err
	}
	*n = ReservationNotice{
		Count:     le.Uint64(b[ResNoticeOffsetLPC:]),
		Type:      b[ResNoticeOffsetRNLPT],
		Available: b[ResNoticeOffsetNALP],
		NSID:      le.Uint32(b[ResNoticeOffsetNSID:]),
	}
	return nil
}
