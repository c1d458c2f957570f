//go:build arm64 && !noasm && !appengine && !gccgo && !nopshufb

package chunkstore

import "github.com/klauspost/cpuid/v2"

func simdPath() string {
	switch {
	case cpuid.CPU.Supports(cpuid.SVE):
		return "ARM+SVE"
	case cpuid.CPU.Supports(cpuid.ASIMD):
		return "ARM+NEON"
	}
	return pureGo
}
