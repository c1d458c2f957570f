package nvmeof

import "math"

// SGLDescriptorSize is the size of an SGL descriptor.
const SGLDescriptorSize = 16

// Byte offsets inside an SGL descriptor (NVMe Base 2.x, 4.3.2, Figures
// 115 to 122).
const (
	SGLOffsetAddress    = 0  // Address (Data Block, Keyed, Segment); offset for the Offset subtype
	SGLOffsetLength     = 8  // Length, 4 bytes (Data Block, Segment, Transport)
	SGLOffsetKeyedLen   = 8  // Length, 3 bytes (Keyed SGL Data Block)
	SGLOffsetKey        = 11 // Key, 4 bytes (Keyed SGL Data Block)
	SGLOffsetIdentifier = 15 // SGL Identifier: type in bits 7:4, subtype in bits 3:0
)

// MaxKeyedSGLLength is the largest length a Keyed SGL Data Block
// descriptor can carry (16 MiB - 1).
const MaxKeyedSGLLength = 1<<24 - 1

// SGLType is the SGL Descriptor Type (bits 7:4 of the SGL Identifier).
type SGLType uint8

// SGL descriptor types.
const (
	SGLTypeDataBlock          SGLType = 0x0
	SGLTypeBitBucket          SGLType = 0x1
	SGLTypeSegment            SGLType = 0x2
	SGLTypeLastSegment        SGLType = 0x3
	SGLTypeKeyedDataBlock     SGLType = 0x4
	SGLTypeTransportDataBlock SGLType = 0x5
	SGLTypeVendorSpecific     SGLType = 0xf
)

// SGLSubtype is the SGL Descriptor Sub Type (bits 3:0 of the SGL
// Identifier).
type SGLSubtype uint8

// SGL descriptor subtypes.
const (
	// SGLSubtypeAddress: the Address field is a memory address.
	SGLSubtypeAddress SGLSubtype = 0x0
	// SGLSubtypeOffset: the Address field is an offset into the capsule's
	// in-capsule data (Data Block, Segment, Last Segment).
	SGLSubtypeOffset SGLSubtype = 0x1
	// SGLSubtypeTransport: NVMe/TCP transport specific value Ah: the data
	// moves in H2CData/C2HData PDUs or in the capsule.
	SGLSubtypeTransport SGLSubtype = 0xa
	// SGLSubtypeInvalidateKey: NVMe/RDMA transport specific value Fh on a
	// Keyed SGL Data Block: the host asks for the key to be invalidated
	// remotely (Send with Invalidate).
	SGLSubtypeInvalidateKey SGLSubtype = 0xf
)

// SGLIdentifier is byte 15 of an SGL descriptor.
type SGLIdentifier uint8

// SGL identifiers used by NVMe over Fabrics.
const (
	// SGLKeyedAddress: Keyed SGL Data Block, address subtype (40h): RDMA.
	SGLKeyedAddress SGLIdentifier = 0x40
	// SGLKeyedInvalidate: Keyed SGL Data Block with invalidate (4Fh): RDMA.
	SGLKeyedInvalidate SGLIdentifier = 0x4f
	// SGLDataBlockOffset: SGL Data Block, offset subtype (01h): in-capsule data.
	SGLDataBlockOffset SGLIdentifier = 0x01
	// SGLTransportDataBlock: Transport SGL Data Block, subtype Ah (5Ah): TCP.
	SGLTransportDataBlock SGLIdentifier = 0x5a
	// SGLLastSegmentOffset: SGL Last Segment, offset subtype (31h): a
	// list of descriptors in the capsule.
	SGLLastSegmentOffset SGLIdentifier = 0x31
)

// NewSGLIdentifier combines a type and a subtype.
func NewSGLIdentifier(t SGLType, st SGLSubtype) SGLIdentifier {
	return SGLIdentifier(t&0xf)<<4 | SGLIdentifier(st&0xf)
}

// Type returns the descriptor type.
func (id SGLIdentifier) Type() SGLType { return SGLType(id >> 4) }

// Subtype returns the descriptor subtype.
func (id SGLIdentifier) Subtype() SGLSubtype { return SGLSubtype(id & 0xf) }

// SGLDescriptor is a 16-byte SGL descriptor as it is on the wire, in a
// command's DPTR (SGL1) or in a descriptor list. Read it with the typed
// views (Keyed, InCapsule, Transport, Segment) or decode it with an
// SGLPolicy; build one with the Descriptor method of a typed view.
type SGLDescriptor [SGLDescriptorSize]byte

// Identifier returns byte 15.
func (d SGLDescriptor) Identifier() SGLIdentifier { return SGLIdentifier(d[SGLOffsetIdentifier]) }

// Type returns the descriptor type.
func (d SGLDescriptor) Type() SGLType { return d.Identifier().Type() }

// Subtype returns the descriptor subtype.
func (d SGLDescriptor) Subtype() SGLSubtype { return d.Identifier().Subtype() }

// address returns bytes 7:0.
func (d SGLDescriptor) address() uint64 { return le.Uint64(d[SGLOffsetAddress:]) }

// length returns the 4-byte length at bytes 11:8.
func (d SGLDescriptor) length() uint32 { return le.Uint32(d[SGLOffsetLength:]) }

// isZero reports whether every byte is zero: the NULL descriptor.
func (d SGLDescriptor) isZero() bool { return d == SGLDescriptor{} }

// SGLKind classifies a descriptor by what a controller does with it.
type SGLKind uint8

// Descriptor kinds.
const (
	// SGLKindOther: a reserved or vendor specific type, or a subtype not
	// defined for its type.
	SGLKindOther SGLKind = iota
	// SGLKindNull: all sixteen bytes zero; no data.
	SGLKindNull
	// SGLKindKeyed: Keyed SGL Data Block (40h or 4Fh).
	SGLKindKeyed
	// SGLKindInCapsule: SGL Data Block with the Offset subtype (01h).
	SGLKindInCapsule
	// SGLKindTransport: Transport SGL Data Block (5Ah).
	SGLKindTransport
	// SGLKindSegment: SGL Segment, address or offset subtype.
	SGLKindSegment
	// SGLKindLastSegment: SGL Last Segment, address or offset subtype.
	SGLKindLastSegment
	// SGLKindDataBlock: SGL Data Block with a memory address (00h), which
	// a fabrics controller cannot reach.
	SGLKindDataBlock
	// SGLKindBitBucket: SGL Bit Bucket.
	SGLKindBitBucket
)

var sglKindNames = [...]string{
	"other", "null", "keyed data block", "in-capsule data block",
	"transport data block", "segment", "last segment", "data block",
	"bit bucket",
}

func (k SGLKind) String() string {
	if int(k) < len(sglKindNames) {
		return sglKindNames[k]
	}
	return "SGLKind(?)"
}

// Kind classifies the descriptor from its identifier.
func (d SGLDescriptor) Kind() SGLKind {
	t, st := d.Type(), d.Subtype()
	switch t {
	case SGLTypeDataBlock:
		switch st {
		case SGLSubtypeAddress:
			if d.isZero() {
				return SGLKindNull
			}
			return SGLKindDataBlock
		case SGLSubtypeOffset:
			return SGLKindInCapsule
		}
	case SGLTypeBitBucket:
		if st == SGLSubtypeAddress {
			return SGLKindBitBucket
		}
	case SGLTypeSegment, SGLTypeLastSegment:
		if st == SGLSubtypeAddress || st == SGLSubtypeOffset {
			if t == SGLTypeSegment {
				return SGLKindSegment
			}
			return SGLKindLastSegment
		}
	case SGLTypeKeyedDataBlock:
		if st == SGLSubtypeAddress || st == SGLSubtypeInvalidateKey {
			return SGLKindKeyed
		}
	case SGLTypeTransportDataBlock:
		if st == SGLSubtypeTransport {
			return SGLKindTransport
		}
	}
	return SGLKindOther
}

// KeyedSGL is a Keyed SGL Data Block descriptor: a region of host memory
// named by address and remote key, which an RDMA controller reads or
// writes with one-sided operations.
type KeyedSGL struct {
	Address uint64
	// Length is 24 bits on the wire: at most MaxKeyedSGLLength.
	Length uint32
	Key    uint32
	// Invalidate asks the controller to invalidate Key remotely (subtype
	// Fh) when it sends the response.
	Invalidate bool
}

// Descriptor encodes k. It fails with ErrFieldValue if Length does not fit
// in 24 bits.
func (k KeyedSGL) Descriptor() (SGLDescriptor, error) {
	var d SGLDescriptor
	if k.Length > MaxKeyedSGLLength {
		return d, &FieldError{Structure: "Keyed SGL Data Block", Field: "Length", Offset: SGLOffsetKeyedLen, Err: ErrFieldValue}
	}
	le.PutUint64(d[SGLOffsetAddress:], k.Address)
	d[SGLOffsetKeyedLen] = byte(k.Length)
	d[SGLOffsetKeyedLen+1] = byte(k.Length >> 8)
	d[SGLOffsetKeyedLen+2] = byte(k.Length >> 16)
	le.PutUint32(d[SGLOffsetKey:], k.Key)
	id := SGLKeyedAddress
	if k.Invalidate {
		id = SGLKeyedInvalidate
	}
	d[SGLOffsetIdentifier] = byte(id)
	return d, nil
}

// Keyed returns the descriptor as a KeyedSGL, if it is one.
func (d SGLDescriptor) Keyed() (KeyedSGL, bool) {
	if d.Kind() != SGLKindKeyed {
		return KeyedSGL{}, false
	}
	return KeyedSGL{
		Address:    d.address(),
		Length:     uint32(d[8]) | uint32(d[9])<<8 | uint32(d[10])<<16,
		Key:        le.Uint32(d[SGLOffsetKey:]),
		Invalidate: d.Subtype() == SGLSubtypeInvalidateKey,
	}, true
}

// InCapsuleSGL is an SGL Data Block descriptor with the Offset subtype:
// data carried in the command capsule, Offset bytes after the start of the
// in-capsule data.
type InCapsuleSGL struct {
	Offset uint64
	Length uint32
}

// Descriptor encodes s.
func (s InCapsuleSGL) Descriptor() SGLDescriptor {
	var d SGLDescriptor
	le.PutUint64(d[SGLOffsetAddress:], s.Offset)
	le.PutUint32(d[SGLOffsetLength:], s.Length)
	d[SGLOffsetIdentifier] = byte(SGLDataBlockOffset)
	return d
}

// InCapsule returns the descriptor as an InCapsuleSGL, if it is one.
func (d SGLDescriptor) InCapsule() (InCapsuleSGL, bool) {
	if d.Kind() != SGLKindInCapsule {
		return InCapsuleSGL{}, false
	}
	return InCapsuleSGL{Offset: d.address(), Length: d.length()}, true
}

// TransportSGL is a Transport SGL Data Block descriptor with subtype Ah, as
// NVMe/TCP uses it: the data moves in data PDUs (or in the capsule), and
// only its length is in the descriptor.
type TransportSGL struct {
	Length uint32
}

// Descriptor encodes s.
func (s TransportSGL) Descriptor() SGLDescriptor {
	var d SGLDescriptor
	le.PutUint32(d[SGLOffsetLength:], s.Length)
	d[SGLOffsetIdentifier] = byte(SGLTransportDataBlock)
	return d
}

// Transport returns the descriptor as a TransportSGL, if it is one.
func (d SGLDescriptor) Transport() (TransportSGL, bool) {
	if d.Kind() != SGLKindTransport {
		return TransportSGL{}, false
	}
	return TransportSGL{Length: d.length()}, true
}

// SegmentSGL is an SGL Segment or SGL Last Segment descriptor: it points at
// a further list of descriptors, in memory or (Offset subtype) in the
// capsule.
type SegmentSGL struct {
	// Last marks an SGL Last Segment descriptor.
	Last bool
	// Offset marks the Offset subtype: Address is an offset into the
	// in-capsule data.
	Offset  bool
	Address uint64
	// Length is the size of the segment in bytes: a nonzero multiple of 16.
	Length uint32
}

// Descriptor encodes s.
func (s SegmentSGL) Descriptor() SGLDescriptor {
	var d SGLDescriptor
	le.PutUint64(d[SGLOffsetAddress:], s.Address)
	le.PutUint32(d[SGLOffsetLength:], s.Length)
	t, st := SGLTypeSegment, SGLSubtypeAddress
	if s.Last {
		t = SGLTypeLastSegment
	}
	if s.Offset {
		st = SGLSubtypeOffset
	}
	d[SGLOffsetIdentifier] = byte(NewSGLIdentifier(t, st))
	return d
}

// Segment returns the descriptor as a SegmentSGL, if it is an SGL Segment
// or SGL Last Segment descriptor.
func (d SGLDescriptor) Segment() (SegmentSGL, bool) {
	k := d.Kind()
	if k != SGLKindSegment && k != SGLKindLastSegment {
		return SegmentSGL{}, false
	}
	return SegmentSGL{
		Last:    k == SGLKindLastSegment,
		Offset:  d.Subtype() == SGLSubtypeOffset,
		Address: d.address(),
		Length:  d.length(),
	}, true
}

// DataPointer is a decoded SGL1: the kind of descriptor and the typed view
// that goes with it. Only the view named by Kind is filled in.
type DataPointer struct {
	Kind      SGLKind
	Keyed     KeyedSGL     // SGLKindKeyed
	InCapsule InCapsuleSGL // SGLKindInCapsule
	Transport TransportSGL // SGLKindTransport
	Segment   SegmentSGL   // SGLKindSegment, SGLKindLastSegment
}

// Length returns the number of data bytes the pointer describes (for a
// segment, the size of the descriptor list).
func (p DataPointer) Length() uint32 {
	switch p.Kind {
	case SGLKindKeyed:
		return p.Keyed.Length
	case SGLKindInCapsule:
		return p.InCapsule.Length
	case SGLKindTransport:
		return p.Transport.Length
	case SGLKindSegment, SGLKindLastSegment:
		return p.Segment.Length
	}
	return 0
}

// SGLPolicy says which descriptors a controller accepts in SGL1 of a
// command capsule, for one transport and one capsule. The zero value
// accepts only the NULL descriptor and in-capsule data that is not there.
//
// In-capsule offsets count from the end of the submission queue entry:
// the policy is for an ICDOFF of 0, the only value Linux hosts accept.
// Whether in-capsule data suits the command (only commands that transfer
// data from host to controller carry it) is for the caller to check.
type SGLPolicy struct {
	// Keyed accepts Keyed SGL Data Block descriptors (40h, 4Fh): RDMA.
	Keyed bool
	// Transport accepts Transport SGL Data Block descriptors (5Ah): TCP.
	Transport bool
	// InCapsuleSize is the number of bytes the capsule holds after the
	// submission queue entry.
	InCapsuleSize int
	// MaxDataBlocks is the MSDBD the controller reports: the most data
	// block descriptors a capsule may hold. Above 1, SGL1 may be an SGL
	// Last Segment descriptor (Offset subtype) pointing at a list of up
	// to MaxDataBlocks descriptors in the capsule.
	MaxDataBlocks int
}

// Decode classifies SGL1 and reports the status a controller completes
// the command with when the descriptor is not acceptable under p
// (StatusSuccess when it is). The returned DataPointer is filled in either
// way, so a refused descriptor can still be logged.
//
// The statuses follow NVMe Base 2.x 4.3.2 (Figure 113) and 3.3.2.1.3.1:
//   - a type, or a type and subtype, the transport does not use (including
//     a Data Block with a memory address, a Bit Bucket, an SGL Segment,
//     and an SGL Last Segment when MaxDataBlocks <= 1): SGL Descriptor
//     Type Invalid;
//   - a Last Segment whose length is zero or not a multiple of 16: Invalid
//     SGL Segment Descriptor;
//   - a Last Segment listing more than MaxDataBlocks descriptors, or lying
//     beyond the capsule: Invalid Number of SGL Descriptors;
//   - in-capsule data whose offset is at or past the end of the capsule:
//     SGL Offset Invalid; whose length runs past it: Data SGL Length
//     Invalid;
//   - a Keyed SGL whose address plus length passes 2^64: Data SGL Length
//     Invalid.
//
// Decode does not allocate.
func (p SGLPolicy) Decode(d SGLDescriptor) (DataPointer, Status) {
	dp := DataPointer{Kind: d.Kind()}
	switch dp.Kind {
	case SGLKindNull:
		return dp, StatusSuccess
	case SGLKindKeyed:
		dp.Keyed, _ = d.Keyed()
		if !p.Keyed {
			return dp, StatusSGLDescriptorTypeInvalid
		}
		if dp.Keyed.Address > math.MaxUint64-uint64(dp.Keyed.Length) {
			return dp, StatusDataSGLLengthInvalid
		}
		return dp, StatusSuccess
	case SGLKindTransport:
		dp.Transport, _ = d.Transport()
		if !p.Transport {
			return dp, StatusSGLDescriptorTypeInvalid
		}
		return dp, StatusSuccess
	case SGLKindInCapsule:
		dp.InCapsule, _ = d.InCapsule()
		return dp, p.checkInCapsule(dp.InCapsule.Offset, dp.InCapsule.Length)
	case SGLKindLastSegment:
		dp.Segment, _ = d.Segment()
		s := dp.Segment
		if !s.Offset || p.MaxDataBlocks <= 1 {
			return dp, StatusSGLDescriptorTypeInvalid
		}
		if s.Length == 0 || s.Length%SGLDescriptorSize != 0 {
			return dp, StatusInvalidSGLSegmentDescriptor
		}
		if s.Length/SGLDescriptorSize > uint32(p.MaxDataBlocks) {
			return dp, StatusInvalidNumberOfSGLDescriptors
		}
		if st := p.checkInCapsule(s.Address, s.Length); st != StatusSuccess {
			return dp, StatusInvalidNumberOfSGLDescriptors
		}
		return dp, StatusSuccess
	case SGLKindSegment:
		dp.Segment, _ = d.Segment()
	}
	return dp, StatusSGLDescriptorTypeInvalid
}

// checkInCapsule checks that [off, off+n) lies in the in-capsule bytes.
func (p SGLPolicy) checkInCapsule(off uint64, n uint32) Status {
	if n == 0 {
		return StatusSuccess
	}
	size := uint64(max(p.InCapsuleSize, 0))
	if off >= size {
		return StatusSGLOffsetInvalid
	}
	if uint64(n) > size-off {
		return StatusDataSGLLengthInvalid
	}
	return StatusSuccess
}
