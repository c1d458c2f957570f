//go:build amd64 && !noasm && !appengine && !gccgo && !nopshufb

package chunkstore

import "github.com/klauspost/cpuid/v2"

// simdPath names the instruction set reedsolomon picks on this CPU,
// following its own detection order (options.go in reedsolomon).
func simdPath() string {
	switch {
	case cpuid.CPU.Supports(cpuid.AVX512F, cpuid.GFNI, cpuid.AVX512DQ):
		return "AVX512+GFNI"
	case cpuid.CPU.Supports(cpuid.AVX, cpuid.GFNI):
		return "AVX+GFNI"
	case cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL):
		return "AVX512"
	case cpuid.CPU.Supports(cpuid.AVX2):
		return "AVX2"
	case cpuid.CPU.Supports(cpuid.SSSE3):
		return "SSSE3"
	}
	return pureGo
}
