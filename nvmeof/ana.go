package nvmeof

import "fmt"

// Asymmetric Namespace Access (NVMe Base 2.x, "Asymmetric Namespace
// Access Reporting" and the "Asymmetric Namespace Access" log page, LID
// 0Ch). A namespace belongs to one ANA group (ANAGRPID in Identify
// Namespace); each controller reports, per group, the state in which it
// gives access to the group's namespaces.

// ANAState is the state of an ANA group as a controller reports it
// (ANA State field of an ANA Group Descriptor, bits 3:0).
type ANAState uint8

// ANA states.
const (
	// ANAOptimized: the controller gives the best access to the
	// namespaces of the group.
	ANAOptimized ANAState = 0x01
	// ANANonOptimized: the namespaces are accessible, less well than
	// through a controller that reports ANAOptimized.
	ANANonOptimized ANAState = 0x02
	// ANAInaccessible: commands that use the namespaces' data are
	// aborted with StatusANAInaccessible; the state may change.
	ANAInaccessible ANAState = 0x03
	// ANAPersistentLoss: as Inaccessible, and the state is not expected
	// to change (StatusANAPersistentLoss).
	ANAPersistentLoss ANAState = 0x04
	// ANAChange: the group is moving between states; commands are
	// aborted with StatusANATransition, and the host waits up to ANATT.
	ANAChange ANAState = 0x0f
)

// Valid reports whether s is one of the five defined states.
func (s ANAState) Valid() bool {
	switch s {
	case ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange:
		return true
	}
	return false
}

// Usable reports whether commands to the group's namespaces run
// through a controller in state s: Optimized or Non-Optimized.
func (s ANAState) Usable() bool { return s == ANAOptimized || s == ANANonOptimized }

// Status is the Path Related Status (SCT 3h, DNR clear, so that a host
// retries on another path) a controller aborts an I/O command with in
// state s: Asymmetric Access Inaccessible, Persistent Loss or Transition;
// StatusSuccess for the usable states.
func (s ANAState) Status() Status {
	switch s {
	case ANAInaccessible:
		return StatusANAInaccessible
	case ANAPersistentLoss:
		return StatusANAPersistentLoss
	case ANAChange:
		return StatusANATransition
	}
	return StatusSuccess
}

func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent loss"
	case ANAChange:
		return "change"
	}
	return fmt.Sprintf("ANAState(%#x)", uint8(s))
}

// ANACAP bits (Identify Controller, Asymmetric Namespace Access
// Capabilities): which states the controller may report, and how ANA
// group IDs behave.
const (
	ANACAPOptimized      uint8 = 1 << 0
	ANACAPNonOptimized   uint8 = 1 << 1
	ANACAPInaccessible   uint8 = 1 << 2
	ANACAPPersistentLoss uint8 = 1 << 3
	ANACAPChange         uint8 = 1 << 4
	// ANACAPGroupIDFixed (bit 6): a namespace's ANAGRPID does not
	// change while it is attached.
	ANACAPGroupIDFixed uint8 = 1 << 6
	// ANACAPGroupIDInNSMgmt (bit 7): a non-zero ANAGRPID is taken by
	// Namespace Management.
	ANACAPGroupIDInNSMgmt uint8 = 1 << 7
)

// LSPANAReturnGroupsOnly is the RGO bit of the Log Specific Parameter of
// Get Log Page for the ANA log page: descriptors without their NSID
// lists (Number of NSID Values 0).
const LSPANAReturnGroupsOnly uint8 = 1 << 0

// Sizes and byte offsets of the ANA log page: a 16-byte header, then one
// descriptor per ANA group, each 32 bytes followed by its NSIDs, 4 bytes
// each.
const (
	ANALogHeaderSize       = 16
	ANAGroupDescriptorSize = 32 // without the NSID list

	ANALogOffsetCHGCNT  = 0 // Change Count, 8 bytes
	ANALogOffsetNUMDESC = 8 // Number of ANA Group Descriptors, 2 bytes; 15:10 reserved

	ANADescOffsetANAGRPID = 0  // ANA Group ID
	ANADescOffsetNNSID    = 4  // Number of NSID Values
	ANADescOffsetCHGCNT   = 8  // Change Count, 8 bytes
	ANADescOffsetState    = 16 // ANA State, bits 3:0; 7:4 and bytes 31:17 reserved
	ANADescOffsetNSIDs    = 32 // Namespace Identifiers, 4 bytes each
)

// ANAGroupDescriptor is one ANA group of the ANA log page.
type ANAGroupDescriptor struct {
	// ANAGRPID is the group (1 to ANAGRPMAX; 0 is not a group).
	ANAGRPID uint32
	// ChangeCount changes whenever the descriptor does.
	ChangeCount uint64
	// State is the group's state through the controller that reports it.
	State ANAState
	// NSIDs are the group's namespaces attached to the controller; none
	// when the page was read with RGO.
	NSIDs []uint32
}

// Size is the descriptor's size on the wire.
func (d *ANAGroupDescriptor) Size() int { return ANAGroupDescriptorSize + 4*len(d.NSIDs) }

// ANALog is the Asymmetric Namespace Access log page (LID 0Ch).
type ANALog struct {
	// ChangeCount changes whenever any descriptor does.
	ChangeCount uint64
	Groups      []ANAGroupDescriptor
}

// Size is the page's size on the wire.
func (l *ANALog) Size() int {
	n := ANALogHeaderSize
	for i := range l.Groups {
		n += l.Groups[i].Size()
	}
	return n
}

// MarshalTo writes the page into b, which must hold Size() bytes, with
// reserved bytes cleared. Each group must have a valid state and a
// non-zero ANAGRPID; there may be at most 65535 groups.
func (l *ANALog) MarshalTo(b []byte) (int, error) {
	const name = "ANA log"
	n := l.Size()
	if err := needAtLeast(name, b, n); err != nil {
		return 0, err
	}
	if len(l.Groups) > 0xffff {
		return 0, &FieldError{Structure: name, Field: "NUMDESC", Offset: ANALogOffsetNUMDESC, Err: ErrFieldValue}
	}
	h := b[:ANALogHeaderSize]
	clear(h)
	le.PutUint64(h[ANALogOffsetCHGCNT:], l.ChangeCount)
	le.PutUint16(h[ANALogOffsetNUMDESC:], uint16(len(l.Groups)))
	off := ANALogHeaderSize
	for i := range l.Groups {
		g := &l.Groups[i]
		if g.ANAGRPID == 0 {
			return 0, &FieldError{Structure: name, Field: "ANAGRPID", Offset: off + ANADescOffsetANAGRPID, Err: ErrFieldValue}
		}
		if !g.State.Valid() {
			return 0, &FieldError{Structure: name, Field: "ANA State", Offset: off + ANADescOffsetState, Err: ErrFieldValue}
		}
		d := b[off : off+g.Size()]
		clear(d[:ANAGroupDescriptorSize])
		le.PutUint32(d[ANADescOffsetANAGRPID:], g.ANAGRPID)
		le.PutUint32(d[ANADescOffsetNNSID:], uint32(len(g.NSIDs)))
		le.PutUint64(d[ANADescOffsetCHGCNT:], g.ChangeCount)
		d[ANADescOffsetState] = byte(g.State)
		for j, id := range g.NSIDs {
			le.PutUint32(d[ANADescOffsetNSIDs+4*j:], id)
		}
		off += len(d)
	}
	return n, nil
}

// MarshalBinary returns the page.
func (l *ANALog) MarshalBinary() ([]byte, error) {
	b := make([]byte, l.Size())
	if _, err := l.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly one page: the header and the
// descriptors it announces, with nothing after them (ErrLength).
func (l *ANALog) UnmarshalBinary(b []byte) error {
	n, err := l.UnmarshalPrefix(b)
	if err == nil && n != len(b) {
		*l = ANALog{}
		return sizeError("ANA log", len(b), n, ErrLength)
	}
	return err
}

// UnmarshalPrefix decodes the page at the start of b and returns its
// size; bytes after it are not read. A host reads the page into a buffer
// as large as the page can be (16 + NANAGRPID*32 + MNAN*4 bytes), not as
// large as it is. Every count is checked against the bytes that carry it
// before anything is allocated for it; an ANAGRPID of 0 and a state that
// is not one of the five are refused (ErrFieldValue), as Linux hosts
// refuse them. The reserved bits of the state byte are dropped.
func (l *ANALog) UnmarshalPrefix(b []byte) (int, error) {
	const name = "ANA log"
	if err := needAtLeast(name, b, ANALogHeaderSize); err != nil {
		return 0, err
	}
	count := int(le.Uint16(b[ANALogOffsetNUMDESC:]))
	if count > (len(b)-ANALogHeaderSize)/ANAGroupDescriptorSize {
		return 0, &FieldError{Structure: name, Field: "NUMDESC", Offset: ANALogOffsetNUMDESC, Err: ErrShortBuffer}
	}
	x := ANALog{ChangeCount: le.Uint64(b[ANALogOffsetCHGCNT:])}
	if count > 0 {
		x.Groups = make([]ANAGroupDescriptor, count)
	}
	off := ANALogHeaderSize
	for i := range x.Groups {
		if len(b)-off < ANAGroupDescriptorSize {
			return 0, &FieldError{Structure: name, Field: "NUMDESC", Offset: ANALogOffsetNUMDESC, Err: ErrShortBuffer}
		}
		d := b[off:]
		nn := uint64(le.Uint32(d[ANADescOffsetNNSID:]))
		if nn > uint64(len(d)-ANAGroupDescriptorSize)/4 {
			return 0, &FieldError{Structure: name, Field: "NNSID", Offset: off + ANADescOffsetNNSID, Err: ErrShortBuffer}
		}
		g := ANAGroupDescriptor{
			ANAGRPID:    le.Uint32(d[ANADescOffsetANAGRPID:]),
			ChangeCount: le.Uint64(d[ANADescOffsetCHGCNT:]),
			State:       ANAState(d[ANADescOffsetState] & 0x0f),
		}
		if g.ANAGRPID == 0 {
			return 0, &FieldError{Structure: name, Field: "ANAGRPID", Offset: off + ANADescOffsetANAGRPID, Err: ErrFieldValue}
		}
		if !g.State.Valid() {
			return 0, &FieldError{Structure: name, Field: "ANA State", Offset: off + ANADescOffsetState, Err: ErrFieldValue}
		}
		if nn > 0 {
			g.NSIDs = make([]uint32, nn)
			for j := range g.NSIDs {
				g.NSIDs[j] = le.Uint32(d[ANADescOffsetNSIDs+4*j:])
			}
		}
		x.Groups[i] = g
		off += g.Size()
	}
	*l = x
	return off, nil
}

// MaxANALogSize is the largest ANA log page a controller with nanagrpid
// ANA groups and at most mnan namespaces can return: what a host reads
// (Identify Controller NANAGRPID and MNAN).
func MaxANALogSize(nanagrpid, mnan uint32) uint64 {
	return ANALogHeaderSize + uint64(nanagrpid)*ANAGroupDescriptorSize + uint64(mnan)*4
}
