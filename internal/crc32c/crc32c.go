package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// vpclmulMin is the shortest buffer handed to the folding path: below it
// the SSE 4.2 instruction is as fast and needs no set-up.
const vpclmulMin = 2048

// Update returns the CRC32C of p continuing from crc, as crc32.Update
// with the Castagnoli table does.
func Update(crc uint32, p []byte) uint32 {
	if hasFolding && len(p) >= vpclmulMin {
		n := len(p) &^ 15
		crc = ^fold(^crc, p[:n])
		p = p[n:]
	}
	return crc32.Update(crc, table, p)
}

// Checksum returns the CRC32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }
