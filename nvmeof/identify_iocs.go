package nvmeof

import "fmt"

// The I/O command set Identify structures (NVMe Base 2.x 5.2.13.2 and
// the NVM Command Set specification 1.0, 4.1.5): what a controller that
// reports CAP.CSS bit 6 returns for CNS 05h, 06h, 08h and 1Ch. Each is
// 4096 bytes; every byte not named here is reserved, cleared by
// MarshalTo and ignored by UnmarshalBinary.

// Identify CNS values of the I/O command sets. The command's CSI field
// (CDW11 bits 31:24) names the command set of CNS 05h, 06h and 07h.
const (
	// CNSNamespaceCommandSet is the I/O command set specific Identify
	// Namespace structure of the namespace NSID, for CSI.
	CNSNamespaceCommandSet CNS = 0x05
	// CNSControllerCommandSet is the I/O command set specific Identify
	// Controller structure, for CSI.
	CNSControllerCommandSet CNS = 0x06
	// CNSActiveNamespaceListCommandSet is the active namespace ID list
	// of the namespaces of command set CSI.
	CNSActiveNamespaceListCommandSet CNS = 0x07
	// CNSNamespaceIndependent is the I/O command set independent
	// Identify Namespace structure.
	CNSNamespaceIndependent CNS = 0x08
	// CNSCommandSetList is the Identify I/O Command Set data structure:
	// the combinations of command sets the controller supports.
	CNSCommandSetList CNS = 0x1c
)

// Byte offsets of the NVM command set Identify Namespace structure
// (CNS 05h, CSI 00h).
const (
	IDNSNVMOffsetLBSTM = 0  // 8 bytes, Logical Block Storage Tag Mask
	IDNSNVMOffsetPIC   = 8  // Protection Information Capabilities
	IDNSNVMOffsetELBAF = 12 // 64 Extended LBA Formats, 4 bytes each
	// IDNSNVMELBAFs is the number of Extended LBA Format entries.
	IDNSNVMELBAFs = 64
)

// IdentifyNamespaceNVM is the NVM command set specific Identify Namespace
// structure. A namespace without protection information or storage tags
// has every field zero.
type IdentifyNamespaceNVM struct {
	LBSTM uint64
	PIC   uint8
	ELBAF [IDNSNVMELBAFs]uint32
}

// MarshalTo writes the 4096-byte structure into b.
func (x *IdentifyNamespaceNVM) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("NVM Identify Namespace", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	le.PutUint64(b[IDNSNVMOffsetLBSTM:], x.LBSTM)
	b[IDNSNVMOffsetPIC] = x.PIC
	for i, f := range x.ELBAF {
		le.PutUint32(b[IDNSNVMOffsetELBAF+4*i:], f)
	}
	return IdentifyDataSize, nil
}

// MarshalBinary encodes the structure.
func (x *IdentifyNamespaceNVM) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	_, err := x.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes the structure from exactly 4096 bytes.
func (x *IdentifyNamespaceNVM) UnmarshalBinary(b []byte) error {
	if err := needExactly("NVM Identify Namespace", b, IdentifyDataSize); err != nil {
		return err
	}
	var y IdentifyNamespaceNVM
	y.LBSTM = le.Uint64(b[IDNSNVMOffsetLBSTM:])
	y.PIC = b[IDNSNVMOffsetPIC]
	for i := range y.ELBAF {
		y.ELBAF[i] = le.Uint32(b[IDNSNVMOffsetELBAF+4*i:])
	}
	*x = y
	return nil
}

// Byte offsets of the NVM command set Identify Controller structure
// (CNS 06h, CSI 00h).
const (
	IDCtrlNVMOffsetVSL   = 0 // Verify Size Limit
	IDCtrlNVMOffsetWZSL  = 1 // Write Zeroes Size Limit
	IDCtrlNVMOffsetWUSL  = 2 // Write Uncorrectable Size Limit
	IDCtrlNVMOffsetDMRL  = 3 // Dataset Management Ranges Limit
	IDCtrlNVMOffsetDMRSL = 4 // 4 bytes, Dataset Management Range Size Limit
	IDCtrlNVMOffsetDMSL  = 8 // 8 bytes, Dataset Management Size Limit
)

// IdentifyControllerNVM is the NVM command set specific Identify
// Controller structure. The size limits VSL, WZSL and WUSL are powers of
// two in units of the minimum memory page size (CAP.MPSMIN), 0 for no
// limit; DMRL counts ranges, DMRSL blocks per range, DMSL blocks per
// command, 0 for no limit.
type IdentifyControllerNVM struct {
	VSL, WZSL, WUSL, DMRL uint8
	DMRSL                 uint32
	DMSL                  uint64
}

// MarshalTo writes the 4096-byte structure into b.
func (x *IdentifyControllerNVM) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("NVM Identify Controller", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	b[IDCtrlNVMOffsetVSL], b[IDCtrlNVMOffsetWZSL], b[IDCtrlNVMOffsetWUSL], b[IDCtrlNVMOffsetDMRL] = x.VSL, x.WZSL, x.WUSL, x.DMRL
	le.PutUint32(b[IDCtrlNVMOffsetDMRSL:], x.DMRSL)
	le.PutUint64(b[IDCtrlNVMOffsetDMSL:], x.DMSL)
	return IdentifyDataSize, nil
}

// MarshalBinary encodes the structure.
func (x *IdentifyControllerNVM) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	_, err := x.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes the structure from exactly 4096 bytes.
func (x *IdentifyControllerNVM) UnmarshalBinary(b []byte) error {
	if err := needExactly("NVM Identify Controller", b, IdentifyDataSize); err != nil {
		return err
	}
	*x = IdentifyControllerNVM{
		VSL: b[IDCtrlNVMOffsetVSL], WZSL: b[IDCtrlNVMOffsetWZSL], WUSL: b[IDCtrlNVMOffsetWUSL], DMRL: b[IDCtrlNVMOffsetDMRL],
		DMRSL: le.Uint32(b[IDCtrlNVMOffsetDMRSL:]),
		DMSL:  le.Uint64(b[IDCtrlNVMOffsetDMSL:]),
	}
	return nil
}

// Byte offsets of the I/O command set independent Identify Namespace
// structure (CNS 08h).
const (
	IDNSIndOffsetNSFEAT   = 0
	IDNSIndOffsetNMIC     = 1
	IDNSIndOffsetRESCAP   = 2
	IDNSIndOffsetFPI      = 3
	IDNSIndOffsetANAGRPID = 4 // 4 bytes
	IDNSIndOffsetNSATTR   = 8
	IDNSIndOffsetNVMSETID = 10 // 2 bytes
	IDNSIndOffsetENDGID   = 12 // 2 bytes
	IDNSIndOffsetNSTAT    = 14
)

// NSTATReady is NSTAT bit 0 (NRDY): the namespace is ready.
const NSTATReady uint8 = 1

// IdentifyNamespaceIndependent is the I/O command set independent
// Identify Namespace structure: the fields of a namespace that do not
// depend on its command set.
type IdentifyNamespaceIndependent struct {
	NSFEAT, NMIC, RESCAP, FPI uint8
	ANAGRPID                  uint32
	NSATTR                    uint8
	NVMSETID, ENDGID          uint16
	NSTAT                     uint8
}

// MarshalTo writes the 4096-byte structure into b.
func (x *IdentifyNamespaceIndependent) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("command set independent Identify Namespace", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	b[IDNSIndOffsetNSFEAT], b[IDNSIndOffsetNMIC], b[IDNSIndOffsetRESCAP], b[IDNSIndOffsetFPI] = x.NSFEAT, x.NMIC, x.RESCAP, x.FPI
	le.PutUint32(b[IDNSIndOffsetANAGRPID:], x.ANAGRPID)
	b[IDNSIndOffsetNSATTR] = x.NSATTR
	le.PutUint16(b[IDNSIndOffsetNVMSETID:], x.NVMSETID)
	le.PutUint16(b[IDNSIndOffsetENDGID:], x.ENDGID)
	b[IDNSIndOffsetNSTAT] = x.NSTAT
	return IdentifyDataSize, nil
}

// MarshalBinary encodes the structure.
func (x *IdentifyNamespaceIndependent) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	_, err := x.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes the structure from exactly 4096 bytes.
func (x *IdentifyNamespaceIndependent) UnmarshalBinary(b []byte) error {
	if err := needExactly("command set independent Identify Namespace", b, IdentifyDataSize); err != nil {
		return err
	}
	*x = IdentifyNamespaceIndependent{
		NSFEAT: b[IDNSIndOffsetNSFEAT], NMIC: b[IDNSIndOffsetNMIC], RESCAP: b[IDNSIndOffsetRESCAP], FPI: b[IDNSIndOffsetFPI],
		ANAGRPID: le.Uint32(b[IDNSIndOffsetANAGRPID:]),
		NSATTR:   b[IDNSIndOffsetNSATTR],
		NVMSETID: le.Uint16(b[IDNSIndOffsetNVMSETID:]),
		ENDGID:   le.Uint16(b[IDNSIndOffsetENDGID:]),
		NSTAT:    b[IDNSIndOffsetNSTAT],
	}
	return nil
}

// CommandSetCombinations is the number of I/O Command Set Combination
// vectors in the Identify I/O Command Set data structure.
const CommandSetCombinations = 512

// CommandSetVectorNVM is bit 0 of an I/O Command Set Combination vector:
// the NVM command set (bit n is CSI n).
const CommandSetVectorNVM uint64 = 1 << CSINVM

// CommandSetList is the Identify I/O Command Set data structure (CNS
// 1Ch): 512 8-byte vectors, each a combination of command sets the
// controller can run together, by index (the I/O Command Set Profile
// feature selects one). A vector of zero ends the list.
type CommandSetList [CommandSetCombinations]uint64

// MarshalTo writes the 4096-byte structure into b.
func (l *CommandSetList) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("I/O Command Set data structure", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	for i, v := range l {
		le.PutUint64(b[8*i:], v)
	}
	return IdentifyDataSize, nil
}

// MarshalBinary encodes the list.
func (l *CommandSetList) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	_, err := l.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes the list from exactly 4096 bytes.
func (l *CommandSetList) UnmarshalBinary(b []byte) error {
	if err := needExactly("I/O Command Set data structure", b, IdentifyDataSize); err != nil {
		return err
	}
	for i := range l {
		l[i] = le.Uint64(b[8*i:])
	}
	return nil
}

// String names the combinations in use.
func (l *CommandSetList) String() string {
	n := 0
	for n < len(l) && l[n] != 0 {
		n++
	}
	return fmt.Sprintf("CommandSetList%x", l[:n])
}
