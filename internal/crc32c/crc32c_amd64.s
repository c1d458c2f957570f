//go:build amd64 && !purego

#include "textflag.h"

// CRC32C by folding with carry-less multiplies, bit-reflected, after
// Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"
// and the IEEE code of hash/crc32 (crc32_amd64.s), which this follows
// step by step from the 128-bit fold on. The constants are those of the
// Castagnoli polynomial P = 0x11EDC6F41; gen_test.go derives each one:
//
//	k1024 = reflect32(x^(1024+32) mod P) << 1, reflect32(x^(1024-32) mod P) << 1
//	k128  = reflect32(x^(128+32) mod P) << 1,  reflect32(x^(128-32) mod P) << 1
//	k64   = reflect32(x^64 mod P) << 1
//	poly  = P reflected over 33 bits, and floor(x^64 / P) reflected over 33 bits

// FOLD8 splits the accumulators Y1-Y4 into eight 128-bit values in
// stream order (X1, X9, X2, X10, X3, X11, X4, X12) and folds them into X1;
// it leaves k128 in X0.
#define FOLD8 \
	VEXTRACTI128 $1, Y1, X9; \
	VEXTRACTI128 $1, Y2, X10; \
	VEXTRACTI128 $1, Y3, X11; \
	VEXTRACTI128 $1, Y4, X12; \
	VZEROUPPER; \
	MOVOU k128<>+0(SB), X0; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X9, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X2, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X10, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X3, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X11, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X4, X1; \
	MOVOA     X1, X5; \
	PCLMULQDQ $0x00, X0, X1; \
	PCLMULQDQ $0x11, X0, X5; \
	PXOR      X5, X1; \
	PXOR      X12, X1

// FINISH reduces X1 (with k128 in X0) to the 32-bit CRC in X1's second
// dword: 128 bits to 64, 64 to 32 with k64, then Barrett reduction, as
// in hash/crc32's ieeeCLMUL. It uses X0, X2 and X3.
#define FINISH \
	PCMPEQB   X3, X3; \
	PCLMULQDQ $0x01, X1, X0; \
	PSRLDQ    $8, X1; \
	PXOR      X0, X1; \
	MOVOA X1, X2; \
	MOVQ  k64<>+0(SB), X0; \
	PSRLQ     $32, X3; \
	PSRLDQ    $4, X2; \
	PAND      X3, X1; \
	PCLMULQDQ $0x00, X0, X1; \
	PXOR      X2, X1; \
	MOVOU poly<>+0(SB), X0; \
	MOVOA     X1, X2; \
	PAND      X3, X1; \
	PCLMULQDQ $0x10, X0, X1; \
	PAND      X3, X1; \
	PCLMULQDQ $0x00, X0, X1; \
	PXOR      X2, X1

// func foldVPCLMUL(crc uint32, p []byte) uint32
TEXT ·foldVPCLMUL(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	// Four 256-bit accumulators hold the first 128 bytes, the initial
	// value XORed into the first four.
	VMOVD   AX, X0
	VMOVDQU (SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VPXOR   Y0, Y1, Y1
	ADDQ    $128, SI
	SUBQ    $128, CX
	CMPQ    CX, $128
	JB      reduce

	VBROADCASTI128 k1024<>+0(SB), Y0

	PCALIGN $32
loop128:
	// Each 128-bit lane moves 1024 bits forward and takes in the next
	// 128 bytes.
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	VPCLMULQDQ $0x00, Y0, Y3, Y7
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	VPCLMULQDQ $0x00, Y0, Y4, Y8
	VPCLMULQDQ $0x11, Y0, Y4, Y4
	VPXOR      (SI), Y5, Y5
	VPXOR      32(SI), Y6, Y6
	VPXOR      64(SI), Y7, Y7
	VPXOR      96(SI), Y8, Y8
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y7, Y3, Y3
	VPXOR      Y8, Y4, Y4
	ADDQ       $128, SI
	SUBQ       $128, CX
	CMPQ       CX, $128
	JAE        loop128

reduce:
	FOLD8

	CMPQ CX, $16
	JB   finish

remain16:
	// Whole 16-byte blocks after the last 128.
	MOVOU     (SI), X10
	MOVOA     X1, X5
	PCLMULQDQ $0x00, X0, X1
	PCLMULQDQ $0x11, X0, X5
	PXOR      X5, X1
	PXOR      X10, X1
	ADDQ      $16, SI
	SUBQ      $16, CX
	CMPQ      CX, $16
	JAE       remain16

finish:
	FINISH
	PEXTRD $1, X1, AX
	MOVL   AX, ret+32(FP)
	RET

DATA k1024<>+0(SB)/8, $0x06992cea2
DATA k1024<>+8(SB)/8, $0x00d3b6092
GLOBL k1024<>(SB), RODATA, $16

DATA k128<>+0(SB)/8, $0x0f20c0dfe
DATA k128<>+8(SB)/8, $0x14cd00bd6
GLOBL k128<>(SB), RODATA, $16

DATA k64<>+0(SB)/8, $0x0dd45aab8
GLOBL k64<>(SB), RODATA, $8

DATA poly<>+0(SB)/8, $0x105ec76f1
DATA poly<>+8(SB)/8, $0x0dea713f1
GLOBL poly<>(SB), RODATA, $16

// A block of the interleaved path: blockA bytes folded by VPCLMULQDQ
// while three CRC32 instruction streams take blockB bytes each, so the
// carry-less multiplier and the CRC32 unit work at once.
#define BLOCK_A 16384
#define BLOCK_B 5120

// SCALAR5(off) feeds 8 bytes at off from each of the three streams, five
// times, into R11, R12 and R13.
#define SCALAR5 \
	CRC32Q 0(R8), R11; \
	CRC32Q 0(R9), R12; \
	CRC32Q 0(R10), R13; \
	CRC32Q 8(R8), R11; \
	CRC32Q 8(R9), R12; \
	CRC32Q 8(R10), R13; \
	CRC32Q 16(R8), R11; \
	CRC32Q 16(R9), R12; \
	CRC32Q 16(R10), R13; \
	CRC32Q 24(R8), R11; \
	CRC32Q 24(R9), R12; \
	CRC32Q 24(R10), R13; \
	CRC32Q 32(R8), R11; \
	CRC32Q 32(R9), R12; \
	CRC32Q 32(R10), R13; \
	ADDQ   $40, R8; \
	ADDQ   $40, R9; \
	ADDQ   $40, R10

// func blockVPCLMUL(crc uint32, p *byte) (a, b1, b2, b3 uint32)
//
// p points at blockA+3*blockB bytes: A, then B1, B2 and B3. It returns
// the CRC32C registers (not inverted) of A from crc and of each B from 0.
TEXT ·blockVPCLMUL(SB), NOSPLIT, $0-32
	MOVL crc+0(FP), AX
	MOVQ p+8(FP), SI
	LEAQ BLOCK_A(SI), R8
	LEAQ BLOCK_B(R8), R9
	LEAQ BLOCK_B(R9), R10
	XORL R11, R11
	XORL R12, R12
	XORL R13, R13

	VMOVD   AX, X0
	VMOVDQU (SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VPXOR   Y0, Y1, Y1
	ADDQ    $128, SI
	VBROADCASTI128 k1024<>+0(SB), Y0

	// 40 bytes of each B for the first 128 bytes of A, then the loop
	// takes 128 of A and 40 of each B per turn.
	SCALAR5
	MOVL $(BLOCK_A/128-1), DX

	PCALIGN $32
blockLoop:
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	CRC32Q     0(R8), R11
	CRC32Q     0(R9), R12
	CRC32Q     0(R10), R13
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	CRC32Q     8(R8), R11
	CRC32Q     8(R9), R12
	CRC32Q     8(R10), R13
	VPCLMULQDQ $0x00, Y0, Y3, Y7
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	CRC32Q     16(R8), R11
	CRC32Q     16(R9), R12
	CRC32Q     16(R10), R13
	VPCLMULQDQ $0x00, Y0, Y4, Y8
	VPCLMULQDQ $0x11, Y0, Y4, Y4
	CRC32Q     24(R8), R11
	CRC32Q     24(R9), R12
	CRC32Q     24(R10), R13
	VPXOR      (SI), Y5, Y5
	VPXOR      32(SI), Y6, Y6
	VPXOR      64(SI), Y7, Y7
	VPXOR      96(SI), Y8, Y8
	CRC32Q     32(R8), R11
	CRC32Q     32(R9), R12
	CRC32Q     32(R10), R13
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y7, Y3, Y3
	VPXOR      Y8, Y4, Y4
	ADDQ       $128, SI
	ADDQ       $40, R8
	ADDQ       $40, R9
	ADDQ       $40, R10
	DECL       DX
	JNZ        blockLoop

	FOLD8
	FINISH
	PEXTRD $1, X1, AX
	MOVL   AX, a+16(FP)
	MOVL   R11, b1+20(FP)
	MOVL   R12, b2+24(FP)
	MOVL   R13, b3+28(FP)
	RET
