package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// FPDU framing without markers (RFC 5044 section 4):
//
//	+-------------------------------+-------------------------------+
//	|          ULPDU_Length         |  ULPDU (DDP segment) ...      |
//	+-------------------------------+-------------------------------+
//	|  ... | PAD (0-3 bytes, zero) |            CRC32C             |
//	+---------------------------------------------------------------+
//
// ULPDU_Length counts the ULPDU only. PAD makes 2+ULPDU_Length+PAD a
// multiple of 4. The CRC (when negotiated) covers ULPDU_Length, ULPDU and
// PAD; it is sent as the little-endian image of the CRC32C value.
const (
	ULPDULenSize = 2
	CRCSize      = 4
	MaxULPDU     = 0xffff
	// MinULPDU is the smallest DDP segment: a tagged header.
	MinULPDU = TaggedHeaderLen
)

// Castagnoli is the CRC32C table (hardware accelerated on amd64/arm64).
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PadLen is the number of pad bytes after a ULPDU of n bytes.
func PadLen(n int) int { return (4 - (ULPDULenSize+n)%4) % 4 }

// TrailerLen is pad plus CRC for a ULPDU of n bytes.
func TrailerLen(n int, crc bool) int {
	t := PadLen(n)
	if crc {
		t += CRCSize
	}
	return t
}

// FPDULen is the whole FPDU size for a ULPDU of n bytes.
func FPDULen(n int, crc bool) int { return ULPDULenSize + n + TrailerLen(n, crc) }

// PutTrailer writes the pad and (when crc) the CRC into b for a ULPDU of
// n bytes whose CRC32C, without pad, is sum (crc32.Update from 0 over the
// length field and the ULPDU). It returns the bytes written.
func PutTrailer(b []byte, n int, sum uint32, crc bool) int {
	p := PadLen(n)
	for i := 0; i < p; i++ {
		b[i] = 0
	}
	if !crc {
		return p
	}
	sum = crc32.Update(sum, Castagnoli, b[:p])
	binary.LittleEndian.PutUint32(b[p:], sum)
	return p + CRCSize
}

// CheckTrailer verifies pad and CRC of a trailer t (TrailerLen bytes)
// against sum, the CRC32C of the length field and ULPDU. Pad bytes are
// covered by the CRC but their value is not checked (RFC 5044 says
// ignore on receive).
func CheckTrailer(t []byte, n int, sum uint32, crc bool) error {
	if len(t) != TrailerLen(n, crc) {
		return ErrBadLength
	}
	if !crc {
		return nil
	}
	p := PadLen(n)
	sum = crc32.Update(sum, Castagnoli, t[:p])
	if binary.LittleEndian.Uint32(t[p:]) != sum {
		return ErrCRC
	}
	return nil
}

// MarshalFPDU frames ulpdu into b and returns the FPDU length.
func MarshalFPDU(b []byte, ulpdu []byte, crc bool) (int, error) {
	n := len(ulpdu)
	if n > MaxULPDU {
		return 0, ErrBadLength
	}
	total := FPDULen(n, crc)
	if len(b) < total {
		return 0, ErrShort
	}
	binary.BigEndian.PutUint16(b, uint16(n))
	copy(b[ULPDULenSize:], ulpdu)
	var sum uint32
	if crc {
		sum = crc32.Update(0, Castagnoli, b[:ULPDULenSize+n])
	}
	PutTrailer(b[ULPDULenSize+n:], n, sum, crc)
	return total, nil
}

// ParseFPDU decodes the FPDU at the start of b: it returns the ULPDU
// (aliasing b) and the FPDU's total length. It checks that the length is
// at least MinULPDU, that the whole FPDU is present and the CRC.
func ParseFPDU(b []byte, crc bool) (ulpdu []byte, total int, err error) {
	if len(b) < ULPDULenSize {
		return nil, 0, ErrShort
	}
	n := int(binary.BigEndian.Uint16(b))
	if n < MinULPDU {
		return nil, 0, ErrULPDUTooShort
	}
	total = FPDULen(n, crc)
	if len(b) < total {
		return nil, 0, ErrShort
	}
	var sum uint32
	if crc {
		sum = crc32.Update(0, Castagnoli, b[:ULPDULenSize+n])
	}
	if err := CheckTrailer(b[ULPDULenSize+n:total], n, sum, crc); err != nil {
		return nil, 0, err
	}
	return b[ULPDULenSize : ULPDULenSize+n : ULPDULenSize+n], total, nil
}
