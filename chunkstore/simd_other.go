//go:build !(amd64 || arm64) || noasm || appengine || gccgo || nopshufb

package chunkstore

// simdPath: this build uses reedsolomon's pure-Go code.
func simdPath() string { return pureGo }
