//go:build amd64 && !purego

package crc32c

import (
	"hash/crc32"

	"github.com/klauspost/cpuid/v2"
)

// hasFolding is set when the CPU has the 256-bit carry-less multiply and
// the OS saves the YMM registers (cpuid checks both for AVX2).
var hasFolding = cpuid.CPU.Supports(cpuid.AVX2, cpuid.CLMUL, cpuid.VPCLMULQDQ, cpuid.SSE42)

// foldVPCLMUL is in crc32c_amd64.s. It returns the CRC32C register (not
// inverted) after p, starting from crc (not inverted). len(p) must be at
// least 128 and a multiple of 16.
//
//go:noescape
func foldVPCLMUL(crc uint32, p []byte) uint32

// blockVPCLMUL is in crc32c_amd64.s: for the blockLen bytes at p, split
// as A (blockA bytes), B1, B2, B3 (blockB bytes each), it returns the
// CRC32C registers (not inverted) of A from crc and of each B from 0.
//
//go:noescape
func blockVPCLMUL(crc uint32, p *byte) (a, b1, b2, b3 uint32)

// The block geometry of crc32c_amd64.s (BLOCK_A, BLOCK_B): per loop turn
// 128 bytes of A go through the carry-less multiplier while 3×40 bytes of
// B go through the CRC32 instruction, which keeps both units about
// equally busy.
const (
	blockA   = 16384
	blockB   = 5120
	blockLen = blockA + 3*blockB
)

// shiftTable advances a CRC register over a fixed run of zero bytes:
// the register r becomes t[0][r&0xff] ^ t[1][r>>8&0xff] ^ t[2][r>>16&0xff]
// ^ t[3][r>>24] (the map is linear over GF(2)).
type shiftTable [4][256]uint32

// shiftB1, shiftB2, shiftB3 advance a register over 1, 2 and 3 times
// blockB zero bytes.
var shiftB1, shiftB2, shiftB3 *shiftTable

func init() {
	if !hasFolding {
		return
	}
	zeros := make([]byte, 3*blockB)
	shiftB1 = newShiftTable(zeros[:blockB])
	shiftB2 = newShiftTable(zeros[:2*blockB])
	shiftB3 = newShiftTable(zeros)
}

func newShiftTable(zeros []byte) *shiftTable {
	t := new(shiftTable)
	for i := range 4 {
		for bit := range 8 {
			r := uint32(1) << (8*i + bit)
			t[i][1<<bit] = ^crc32.Update(^r, table, zeros)
		}
		for b := 1; b < 256; b++ {
			low := b & -b
			t[i][b] = t[i][low] ^ t[i][b^low]
		}
	}
	return t
}

func (t *shiftTable) shift(r uint32) uint32 {
	return t[0][r&0xff] ^ t[1][r>>8&0xff] ^ t[2][r>>16&0xff] ^ t[3][r>>24]
}

// fold returns the CRC32C register (not inverted) after p from crc; len(p)
// is at least 128 and a multiple of 16.
func fold(crc uint32, p []byte) uint32 {
	for len(p) >= blockLen {
		a, b1, b2, b3 := blockVPCLMUL(crc, &p[0])
		crc = shiftB3.shift(a) ^ shiftB2.shift(b1) ^ shiftB1.shift(b2) ^ b3
		p = p[blockLen:]
	}
	if len(p) >= 128 {
		crc = foldVPCLMUL(crc, p)
	} else if len(p) > 0 {
		crc = ^crc32.Update(^crc, table, p)
	}
	return crc
}
