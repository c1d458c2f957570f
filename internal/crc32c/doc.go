// Package crc32c computes CRC32C (Castagnoli) faster than hash/crc32
// where the CPU allows. It is the checksum of MPA FPDUs (rdma/iwarp), of
// NVMe/TCP header and data digests (nvmeof) and of chunkstore's sectors.
//
// Update(crc, p) returns exactly crc32.Update(crc, crc32.MakeTable(
// crc32.Castagnoli), p) for every crc and p; Checksum(p) is Update(0, p).
//
// On amd64 with AVX2, PCLMULQDQ and VPCLMULQDQ (crc32c_amd64.s), a
// buffer of at least vpclmulMin bytes is folded 128 bytes at a time with
// 256-bit carry-less multiplies (four accumulators, the method of Intel's
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", with the
// Castagnoli constants; gen_test.go derives and checks them), then
// reduced to 32 bits by Barrett reduction. The tail of fewer than 16
// bytes, short buffers and every other CPU go to hash/crc32, which uses
// the SSE 4.2 CRC32 instruction (about 20 GB/s on the AMD EPYC build
// machines, where the folding path ran at about 2.5 times that; on the
// Intel Xeon with AVX-512, 25 GB/s against 54 GB/s at 1 MiB and 26
// against 51 at 4 KiB, BenchmarkUpdate). The purego build tag turns the
// assembly off.
//
// The tests compare both paths with hash/crc32 for every length up to
// 4 KiB at every alignment in a 64-byte window, for random initial values,
// and FuzzUpdate keeps doing so on arbitrary input.
package crc32c
