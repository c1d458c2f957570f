package chunkstore

const pureGo = "pure Go"

// SIMD names the vector instructions the erasure coder uses on this
// machine and build: "AVX512+GFNI", "AVX+GFNI", "AVX512", "AVX2", "SSSE3",
// "ARM+SVE", "ARM+NEON", or "pure Go" (the slow fallback, about ten times
// slower: see BenchmarkEncode). Open logs it and Info reports it.
func SIMD() string { return simdPath() }
